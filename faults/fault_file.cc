#include "faults/fault_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "faults/fault_rule_text.h"

namespace rpma_harness {
namespace {

struct Failure {
  TextPosition at;
  std::string message;
};

[[noreturn]] void Fail(int line, size_t column0, std::string message) {
  TextPosition at;
  at.line = line;
  at.column = static_cast<int>(column0) + 1;
  throw Failure{at, std::move(message)};
}

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

// Skips spaces from `i`; returns the first non-space index.
size_t SkipSpaces(const std::string& s, size_t i) {
  while (i < s.size() && s[i] == ' ') ++i;
  return i;
}

// After a value: only spaces, then the end or a comment.
void ExpectEnd(const std::string& s, size_t i, int line) {
  const size_t j = SkipSpaces(s, i);
  if (j < s.size() && s[j] != '#') {
    Fail(line, j,
         "unexpected text after the value (one `key: value` per line; a "
         "comment starts with ' #')");
  }
  if (j < s.size() && j == i) {
    Fail(line, j, "a comment needs a space before '#'");
  }
}

// Reads the value that starts at s[i] (after `key:` and its spaces).
void ReadValue(const std::string& s, size_t i, int line, FaultField* f) {
  f->value_at.line = line;
  f->value_at.column = static_cast<int>(i) + 1;
  if (i >= s.size() || s[i] == '#') {
    f->kind = FaultField::kNull;
    return;
  }
  const char c = s[i];
  if (c == '"' || c == '\'') {
    std::string out;
    size_t j = i + 1;
    for (;; ++j) {
      if (j >= s.size()) {
        Fail(line, i,
             "the quoted value does not end on its line (a faults file "
             "takes one-line values)");
      }
      if (c == '\'' && s[j] == '\'') {
        if (j + 1 < s.size() && s[j + 1] == '\'') {
          out += '\'';
          ++j;
          continue;
        }
        break;
      }
      if (c == '"' && s[j] == '"') break;
      if (c == '"' && s[j] == '\\') {
        if (j + 1 >= s.size()) continue;  // reported as an unended quote
        const char e = s[++j];
        switch (e) {
          case '\\':
            out += '\\';
            break;
          case '"':
            out += '"';
            break;
          case '/':
            out += '/';
            break;
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          default:
            Fail(line, j - 1,
                 std::string("escape '\\") + e +
                     "' is not read in a faults file (use \\\\, \\\", \\n, "
                     "\\t or a single-quoted value)");
        }
        continue;
      }
      out += s[j];
    }
    ExpectEnd(s, j + 1, line);
    f->kind = FaultField::kScalar;
    f->value = out;
    return;
  }
  switch (c) {
    case '[':
    case '{':
      Fail(line, i,
           "flow style ([...] or {...}) is not read in a faults file; write "
           "one value per key, plain or quoted");
    case '&':
    case '*':
      Fail(line, i,
           "anchors and aliases (& *) are not read in a faults file; write "
           "the value out");
    case '!':
      Fail(line, i,
           "tags (!) are not read in a faults file; write the plain value");
    case '|':
    case '>':
      Fail(line, i,
           "block scalars (| >) are not read in a faults file; write the "
           "value on the key's line, quoted if needed");
    case '%':
    case '@':
    case '`':
      Fail(
          line, i,
          std::string("a plain value cannot start with '") + c + "'; quote it");
    case '-':
      if (i + 1 >= s.size() || s[i + 1] == ' ') {
        Fail(line, i,
             "a list is not a value here (nested lists are not read in a "
             "faults file); write one value");
      }
      break;
    default:
      break;
  }
  // A plain scalar: up to a comment (" #") or the end of the line.
  size_t end = s.size();
  const size_t hash = s.find(" #", i);
  if (hash != std::string::npos) end = hash;
  while (end > i && s[end - 1] == ' ') --end;
  std::string text = s.substr(i, end - i);
  const size_t colon = text.find(": ");
  if (colon != std::string::npos || (!text.empty() && text.back() == ':')) {
    Fail(line, i + (colon == std::string::npos ? text.size() - 1 : colon),
         "a plain value cannot contain ': ' (nested mappings are not read "
         "in a faults file); quote the value");
  }
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") {
    f->kind = FaultField::kNull;
    return;
  }
  f->kind = FaultField::kScalar;
  f->value = text;
}

// Reads `key: value` starting at s[i] (the value only if `read_value`).
FaultField ReadField(const std::string& s, size_t i, int line,
                     bool read_value = true) {
  FaultField f;
  f.key_at.line = line;
  f.key_at.column = static_cast<int>(i) + 1;
  size_t j = i;
  while (j < s.size() && IsKeyChar(s[j])) ++j;
  if (j == i) {
    if (s[i] == '"' || s[i] == '\'') {
      Fail(line, i,
           "quoted keys are not read in a faults file; write the key plain");
    }
    if (s[i] == '?' || s[i] == '[' || s[i] == '{') {
      Fail(line, i,
           "complex keys and flow style are not read in a faults file; write "
           "`key: value`");
    }
    Fail(line, i, "expected `key: value` (keys are names: letters, digits, _)");
  }
  f.key = s.substr(i, j - i);
  if (j >= s.size() || s[j] != ':' || (j + 1 < s.size() && s[j + 1] != ' ')) {
    Fail(line, j, "expected ': ' after the key '" + f.key + "'");
  }
  if (read_value) ReadValue(s, SkipSpaces(s, j + 1), line, &f);
  return f;
}

struct Item {
  FaultFields fields;
  size_t dash_indent = 0;
  size_t key_column = std::string::npos;  // unknown until the first key
};

void Parse(const std::string& text, FaultFile* file) {
  enum { kTop, kFaults, kSkip } state = kTop;
  bool seen_faults = false, seen_seed = false, seen_content = false;
  bool faults_null = false;
  int faults_line = 0;
  size_t faults_column = 0;
  std::vector<Item> items;
  size_t pos = 0;
  int line = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // a UTF-8 BOM
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string s = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    for (size_t k = 0; k < s.size(); ++k) {
      const unsigned char c = static_cast<unsigned char>(s[k]);
      if (c < 0x20 && c != '\t') {
        Fail(line, k,
             "a control character (byte " + std::to_string(c) +
                 "); a faults file is text");
      }
    }
    const size_t indent = SkipSpaces(s, 0);
    if (indent < s.size() && s[indent] == '\t') {
      Fail(line, indent, "a tab in the indentation; indent with spaces");
    }
    if (indent >= s.size() || s[indent] == '#') continue;  // blank, comment
    if (s == "---" || s.compare(0, 4, "--- ") == 0) {
      if (seen_content) {
        Fail(line, 0, "a second YAML document; a faults file is one document");
      }
      seen_content = true;
      continue;
    }
    const bool top_level = indent == 0 && s[0] != '-';
    if (top_level && (s == "..." || s.compare(0, 4, "... ") == 0)) {
      Fail(line, 0,
           "'...' ends a YAML document; a faults file is one document");
    }
    if (top_level && s[0] == '%') {
      Fail(line, 0, "YAML directives (%) are not read in a faults file");
    }
    seen_content = true;
    if (top_level) {
      state = kTop;
      // The value of a key other than faults: and seed: is not read.
      FaultField f = ReadField(s, 0, line, /*read_value=*/false);
      if (f.key == "faults" || f.key == "seed") {
        const size_t colon = s.find(':');
        ReadValue(s, SkipSpaces(s, colon + 1), line, &f);
      }
      if (f.key == "faults") {
        if (seen_faults) {
          Fail(line, 0,
               "scenario: key 'faults' is given twice (each key once per "
               "mapping)");
        }
        seen_faults = true;
        faults_line = line;
        faults_column = 0;
        if (f.kind == FaultField::kScalar) {
          Fail(f.value_at.line, f.value_at.column - 1,
               "faults: expected a list of faults (one `- name: ...` entry "
               "per fault on the lines below)");
        }
        faults_null = true;
        state = kFaults;
      } else if (f.key == "seed") {
        if (seen_seed) {
          Fail(line, 0,
               "scenario: key 'seed' is given twice (each key once per "
               "mapping)");
        }
        seen_seed = true;
        if (f.kind != FaultField::kScalar) {
          Fail(f.value_at.line, f.value_at.column - 1,
               "seed: no value (expected a number)");
        }
        uint64_t seed = 0;
        std::string why;
        if (!ParseUnsignedNumber(f.value, UINT64_MAX, &seed, &why)) {
          Fail(f.value_at.line, f.value_at.column - 1, "seed: " + why);
        }
        file->seed = seed;
      } else {
        // A whole scenario file: its other keys do not apply to a process.
        file->ignored_keys.push_back(f.key);
        state = kSkip;
      }
      continue;
    }
    if (state == kSkip) continue;
    if (state == kTop) {
      Fail(line, indent,
           "indented text outside 'faults:' (top-level keys start at column "
           "1)");
    }
    // Inside `faults:`.
    faults_null = false;
    if (s[indent] == '-' && (indent + 1 == s.size() || s[indent + 1] == ' ')) {
      if (!items.empty() && items.back().dash_indent < indent) {
        Fail(line, indent,
             "nested mappings or lists are not read in a faults file; write "
             "the value on its key's line");
      }
      if (!items.empty() && items.back().dash_indent != indent) {
        Fail(line, indent,
             "this '- ' is at column " + std::to_string(indent + 1) +
                 ", the list's first at column " +
                 std::to_string(items.front().dash_indent + 1) +
                 " (nested lists are not read in a faults file)");
      }
      if (items.size() == kMaxFaults) {
        Fail(line, indent,
             "faults: more than " + std::to_string(kMaxFaults) + " faults");
      }
      Item item;
      item.dash_indent = indent;
      item.fields.at.line = line;
      item.fields.at.column = static_cast<int>(indent) + 1;
      const size_t content = SkipSpaces(s, indent + 1);
      if (content < s.size() && s[content] != '#') {
        if (s[content] == '-') {
          Fail(line, content,
               "a list inside a list is not read in a faults file; each "
               "'- ' entry is one fault's `key: value` lines");
        }
        item.key_column = content;
        item.fields.at.column = static_cast<int>(content) + 1;
        item.fields.fields.push_back(ReadField(s, content, line));
      }
      items.push_back(std::move(item));
      continue;
    }
    if (items.empty()) {
      Fail(line, indent,
           "faults: expected a list of faults (each starts with '- ')");
    }
    Item& item = items.back();
    if (indent <= item.dash_indent) {
      Fail(line, indent,
           "expected '- ' (a new fault) or a key indented under the "
           "fault's first key");
    }
    if (item.key_column == std::string::npos) {
      item.key_column = indent;
      item.fields.at.line = line;
      item.fields.at.column = static_cast<int>(indent) + 1;
    }
    if (indent > item.key_column) {
      Fail(line, indent,
           "nested mappings or lists are not read in a faults file; write "
           "the value on its key's line");
    }
    if (indent < item.key_column) {
      Fail(line, indent,
           "this key is at column " + std::to_string(indent + 1) +
               ", the fault's first key at column " +
               std::to_string(item.key_column + 1) + " (align them)");
    }
    item.fields.fields.push_back(ReadField(s, indent, line));
  }
  if (!seen_faults) {
    Fail(1, 0,
         "no 'faults:' list (a faults file is a scenario's faults: list, "
         "e.g. `faults:` then `  - name: ...`)");
  }
  if (faults_null) {
    Fail(faults_line, faults_column, "faults: expected a list of faults");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const FaultFields& fields = items[i].fields;
    if (fields.fields.empty()) {
      Fail(fields.at.line, fields.at.column - 1,
           "faults[" + std::to_string(i) + "]: expected a mapping of keys");
    }
    for (const FaultField& f : fields.fields) {
      if (f.key == "side" || f.key == "connection") {
        Fail(f.key_at.line, f.key_at.column - 1,
             "faults[" + std::to_string(i) + "]." + f.key +
                 ": a faults file (RPMA_HARNESS_FAULTS) applies to the one "
                 "process it is given to; leave '" +
                 f.key +
                 "' out and give the file to that process (the launcher's "
                 "--faults LABEL=FILE)");
      }
    }
    FaultRuleText out;
    FaultTextError error;
    if (!FaultRuleFromFields(fields, i, file->faults, 1, &out, &error)) {
      throw Failure{error.at, error.message};
    }
    file->faults.push_back(out.rule);
  }
}

}  // namespace

bool ParseFaultFileText(const std::string& text, const std::string& file_name,
                        FaultFile* file, std::string* error) {
  if (text.size() > kMaxFaultFileBytes) {
    *error = file_name + ":1:1: the file is larger than " +
             std::to_string(kMaxFaultFileBytes / 1024) +
             " KiB (the limit for a faults file)";
    return false;
  }
  FaultFile parsed;
  try {
    Parse(text, &parsed);
  } catch (const Failure& f) {
    *error = file_name + ":" + std::to_string(f.at.line) + ":" +
             std::to_string(f.at.column) + ": " + f.message;
    return false;
  }
  *file = std::move(parsed);
  return true;
}

bool ReadFaultFile(const std::string& path, FaultFile* file,
                   std::string* error) {
  // O_NONBLOCK: a FIFO must not block the program until a writer comes
  // (it is refused just below, as anything but a regular file is).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = path + ": cannot open the faults file: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *error = path + ": not a regular file (expected a faults file)";
    return false;
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      close(fd);
      *error = path + ": cannot read the faults file: " + std::strerror(saved);
      return false;
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxFaultFileBytes) {
      close(fd);
      *error = path + ": larger than " +
               std::to_string(kMaxFaultFileBytes / 1024) +
               " KiB (the limit for a faults file)";
      return false;
    }
  }
  close(fd);
  return ParseFaultFileText(text, path, file, error);
}

std::shared_ptr<VerbsBackend> WrapWithFaultsFromEnvironment(
    std::shared_ptr<VerbsBackend> backend, std::string* error) {
  // env RPMA_HARNESS_FAULTS=FILE: a faults file (a scenario's `faults:` list
  //   and `seed:`) wraps this process's backend in a FaultInjector. A file
  //   that cannot be used never means "no faults": every call fails, and the
  //   error names the file and the line.
  const char* path = std::getenv("RPMA_HARNESS_FAULTS");
  if (path == nullptr || *path == '\0') return backend;
  const std::string where = std::string("RPMA_HARNESS_FAULTS=") + path;
  FaultFile file;
  if (!ReadFaultFile(path, &file, error)) {
    *error = where + ": " + *error;
    return nullptr;
  }
  if (!file.ignored_keys.empty()) {
    std::string keys;
    for (const std::string& k : file.ignored_keys) {
      keys += (keys.empty() ? "" : ", ") + k;
    }
    std::fprintf(stderr,
                 "rpma-harness: %s: ignoring %s (only faults: and seed: "
                 "apply to a process)\n",
                 where.c_str(), keys.c_str());
  }
  uint64_t seed = file.seed.value_or(1);
  // env RPMA_HARNESS_SEED=N: the seed of RPMA_HARNESS_FAULTS's probabilistic
  //   rules; overrides the file's `seed:` (default 1).
  if (const char* text = std::getenv("RPMA_HARNESS_SEED")) {
    std::string why;
    if (!ParseUnsignedNumber(text, UINT64_MAX, &seed, &why)) {
      *error = std::string("RPMA_HARNESS_SEED='") + text + "': " + why;
      return nullptr;
    }
  }
  auto faults = std::make_shared<FaultInjector>(std::move(backend), seed);
  for (const FaultRule& rule : file.faults) {
    std::string why;
    if (!faults->AddRule(rule, &why)) {
      *error = where + ": fault '" + rule.name + "': " + why;
      return nullptr;
    }
  }
  return faults;
}

}  // namespace rpma_harness
