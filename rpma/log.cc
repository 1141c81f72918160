// librpma's logging: two thresholds, a replaceable log function and the
// default function that writes to syslog and stderr.
//
// The facts followed here are librpma 1.3's (rpma_log_set_threshold(3),
// rpma_log_get_threshold(3), rpma_log_set_function(3)):
//   - a message reaches the log function only when its level is at or below
//     RPMA_LOG_THRESHOLD (default RPMA_LOG_LEVEL_WARNING);
//   - RPMA_LOG_THRESHOLD_AUX (default RPMA_LOG_DISABLED) is for the log
//     function's own use; the default function sends to syslog(3) what
//     passed the main threshold, and also to stderr what is at or below the
//     auxiliary one;
//   - syslog lines are "<level tag><file info><message>" at the syslog
//     severity of the level (FATAL->LOG_CRIT ... DEBUG->LOG_DEBUG) under the
//     ident "rpma" (LOG_PID, LOG_LOCAL7); stderr lines are prefixed with the
//     local time ("Dec 01 07:00:00.123456 ") and "[tid] ".
// The C++ harness API (rpma/harness.h SetLogSink) takes precedence: while a
// sink is installed every message goes to it, whatever the thresholds.

#include <sys/syscall.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "rpma/internal.h"

namespace rpma_harness {
namespace internal {
namespace {

std::atomic<int> g_threshold[RPMA_LOG_THRESHOLD_MAX] = {
    {RPMA_LOG_LEVEL_WARNING}, {RPMA_LOG_DISABLED}};

void DefaultLogFunction(enum rpma_log_level level, const char* file_name,
                        const int line_no, const char* function_name,
                        const char* message_format, ...)
    __attribute__((format(printf, 5, 6)));

std::atomic<rpma_log_function*> g_function{&DefaultLogFunction};

// The tag in front of every line of the default function, as librpma's.
const char* LevelTag(enum rpma_log_level level) {
  switch (level) {
    case RPMA_LOG_LEVEL_FATAL:
      return "*FATAL* ";
    case RPMA_LOG_LEVEL_ERROR:
      return "*ERROR* ";
    case RPMA_LOG_LEVEL_WARNING:
      return "*WARN*  ";
    case RPMA_LOG_LEVEL_NOTICE:
      return "*NOTE*  ";
    case RPMA_LOG_LEVEL_INFO:
      return "*INFO*  ";
    default:
      return "*DEBUG* ";
  }
}

int SyslogSeverity(enum rpma_log_level level) {
  switch (level) {
    case RPMA_LOG_LEVEL_FATAL:
      return LOG_CRIT;
    case RPMA_LOG_LEVEL_ERROR:
      return LOG_ERR;
    case RPMA_LOG_LEVEL_WARNING:
      return LOG_WARNING;
    case RPMA_LOG_LEVEL_NOTICE:
      return LOG_NOTICE;
    case RPMA_LOG_LEVEL_INFO:
      return LOG_INFO;
    default:
      return LOG_DEBUG;
  }
}

void OpenSyslogOnce() {
  static std::once_flag once;
  std::call_once(once, [] { openlog("rpma", LOG_PID, LOG_LOCAL7); });
}

void DefaultLogFunction(enum rpma_log_level level, const char* file_name,
                        const int line_no, const char* function_name,
                        const char* message_format, ...) {
  if (level < RPMA_LOG_LEVEL_FATAL || level > RPMA_LOG_LEVEL_DEBUG) return;
  char message[1024];
  va_list args;
  va_start(args, message_format);
  const int n = std::vsnprintf(message, sizeof(message), message_format, args);
  va_end(args);
  if (n < 0) return;
  char file_info[256] = "";
  if (file_name != nullptr) {
    const char* base = std::strrchr(file_name, '/');
    base = base != nullptr ? base + 1 : file_name;
    std::snprintf(file_info, sizeof(file_info), "%s: %3d: %s: ", base, line_no,
                  function_name != nullptr ? function_name : "");
  }
  if (level <= g_threshold[RPMA_LOG_THRESHOLD_AUX].load()) {
    char stamp[48] = "";
    timespec ts;
    tm local;
    char date[24];
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0 &&
        localtime_r(&ts.tv_sec, &local) != nullptr &&
        std::strftime(date, sizeof(date), "%b %d %H:%M:%S", &local) != 0) {
      std::snprintf(stamp, sizeof(stamp), "%s.%06ld ", date, ts.tv_nsec / 1000);
    }
    std::fprintf(stderr, "%s[%ld] %s%s%s", stamp,
                 static_cast<long>(syscall(SYS_gettid)), LevelTag(level),
                 file_info, message);
  }
  OpenSyslogOnce();
  syslog(SyslogSeverity(level), "%s%s%s", LevelTag(level), file_info, message);
}

bool ValidLevel(int level) {
  return level >= RPMA_LOG_DISABLED && level <= RPMA_LOG_LEVEL_DEBUG;
}

bool ValidThreshold(int threshold) {
  return threshold == RPMA_LOG_THRESHOLD || threshold == RPMA_LOG_THRESHOLD_AUX;
}

}  // namespace

void LogMessage(enum rpma_log_level level, const char* text) {
  // The harness's own sink first (tests); then librpma's rules.
  if (DeliverToSink(text)) return;
  if (level > g_threshold[RPMA_LOG_THRESHOLD].load()) return;
  rpma_log_function* function = g_function.load();
  if (function == nullptr) return;
  // No source position: rpma_log_set_function(3) allows file_name == NULL
  // ("neither line_no nor function_name are provided"). Like librpma's,
  // the message ends with a newline.
  function(level, nullptr, 0, nullptr, "%s\n", text);
}

}  // namespace internal
}  // namespace rpma_harness

using rpma_harness::internal::g_function;
using rpma_harness::internal::g_threshold;

extern "C" int rpma_log_set_threshold(enum rpma_log_threshold threshold_arg,
                                      enum rpma_log_level level_arg) {
  // Unknown values from C callers are read as ints (internal.h EnumAsInt).
  const int threshold = rpma_harness::internal::EnumAsInt(threshold_arg);
  const int level = rpma_harness::internal::EnumAsInt(level_arg);
  if (!rpma_harness::internal::ValidThreshold(threshold) ||
      !rpma_harness::internal::ValidLevel(level)) {
    return RPMA_E_INVAL;
  }
  g_threshold[threshold].store(level);
  return 0;
}

extern "C" int rpma_log_get_threshold(enum rpma_log_threshold threshold_arg,
                                      enum rpma_log_level* level) {
  const int threshold = rpma_harness::internal::EnumAsInt(threshold_arg);
  if (!rpma_harness::internal::ValidThreshold(threshold) || level == nullptr) {
    return RPMA_E_INVAL;
  }
  *level = static_cast<enum rpma_log_level>(g_threshold[threshold].load());
  return 0;
}

extern "C" int rpma_log_set_function(rpma_log_function* log_function) {
  g_function.store(log_function == RPMA_LOG_USE_DEFAULT_FUNCTION
                       ? &rpma_harness::internal::DefaultLogFunction
                       : log_function);
  return 0;
}
