// Readable strings for error codes and connection events: the texts
// librpma itself returns (librpma 1.2, checked by tests/api_abuse_test.sh
// against Debian's librpma.so.0), since a program may print or compare them.

#include "rpma/internal.h"
#include "rpma/librpma.h"

extern "C" const char* rpma_err_2str(int ret) {
  switch (ret) {
    case 0:
      return "Success";
    case RPMA_E_UNKNOWN:
      return "Unknown error";
    case RPMA_E_NOSUPP:
      return "Not supported";
    case RPMA_E_PROVIDER:
      return "Provider error occurred";
    case RPMA_E_NOMEM:
      return "Out of memory";
    case RPMA_E_INVAL:
      return "Invalid argument";
    case RPMA_E_NO_COMPLETION:
      return "No next completion available";
    case RPMA_E_NO_EVENT:
      return "No next event available";
    case RPMA_E_AGAIN:
      return "Temporary error, try again";
    case RPMA_E_SHARED_CHANNEL:
      return "Completion channel is shared";
    case RPMA_E_NOT_SHARED_CHNL:
      return "Completion channel is not shared";
    default:
      return "Unknown error";
  }
}

extern "C" const char* rpma_utils_conn_event_2str(
    enum rpma_conn_event conn_event) {
  // Any int from a C caller: read as an int, never loaded as the enum
  // (internal.h EnumAsInt; found by the rpma_api fuzzer under UBSan).
  switch (rpma_harness::internal::EnumAsInt(conn_event)) {
    case RPMA_CONN_UNDEFINED:
      return "Undefined connection event";
    case RPMA_CONN_ESTABLISHED:
      return "Connection established";
    case RPMA_CONN_CLOSED:
      return "Connection closed";
    case RPMA_CONN_LOST:
      return "Connection lost";
    case RPMA_CONN_REJECTED:
      return "Connection rejected";
    case RPMA_CONN_UNREACHABLE:
      return "Connection unreachable";
  }
  return "Unsupported connection event";
}
