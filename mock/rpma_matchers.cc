#include "mock/rpma_matchers.h"

#include <librpma.h>

#include <cstdio>

namespace rpma_harness {

std::string DescribeRpmaResult(int ret) {
  if (ret == 0) return "0 (success)";
  const char* name = nullptr;
  switch (ret) {
    case RPMA_E_UNKNOWN:
      name = "RPMA_E_UNKNOWN";
      break;
    case RPMA_E_NOSUPP:
      name = "RPMA_E_NOSUPP";
      break;
    case RPMA_E_PROVIDER:
      name = "RPMA_E_PROVIDER";
      break;
    case RPMA_E_NOMEM:
      name = "RPMA_E_NOMEM";
      break;
    case RPMA_E_INVAL:
      name = "RPMA_E_INVAL";
      break;
    case RPMA_E_NO_COMPLETION:
      name = "RPMA_E_NO_COMPLETION";
      break;
    case RPMA_E_NO_EVENT:
      name = "RPMA_E_NO_EVENT";
      break;
    case RPMA_E_AGAIN:
      name = "RPMA_E_AGAIN";
      break;
    case RPMA_E_SHARED_CHANNEL:
      name = "RPMA_E_SHARED_CHANNEL";
      break;
    case RPMA_E_NOT_SHARED_CHNL:
      name = "RPMA_E_NOT_SHARED_CHNL";
      break;
    default:
      return std::to_string(ret) + " (not an RPMA_E_* code)";
  }
  return std::string(name) + " (" + std::to_string(ret) + ": " +
         rpma_err_2str(ret) + ")";
}

std::string HexImm(uint64_t imm) {
  char text[24];
  snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(imm));
  return text;
}

}  // namespace rpma_harness
