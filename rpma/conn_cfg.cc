// Connection configuration: timeouts and queue sizes.

#include <new>

#include "rpma/internal.h"

extern "C" int rpma_conn_cfg_new(struct rpma_conn_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* cfg = new (std::nothrow) rpma_conn_cfg;
  if (cfg == nullptr) return RPMA_E_NOMEM;
  *cfg_ptr = cfg;
  return 0;
}

extern "C" int rpma_conn_cfg_delete(struct rpma_conn_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *cfg_ptr;
  *cfg_ptr = nullptr;
  return 0;
}

extern "C" int rpma_conn_cfg_set_timeout(struct rpma_conn_cfg* cfg,
                                         int timeout_ms) {
  if (cfg == nullptr || timeout_ms < 0) return RPMA_E_INVAL;
  cfg->timeout_ms = timeout_ms;
  return 0;
}

extern "C" int rpma_conn_cfg_get_timeout(const struct rpma_conn_cfg* cfg,
                                         int* timeout_ms) {
  if (cfg == nullptr || timeout_ms == nullptr) return RPMA_E_INVAL;
  *timeout_ms = cfg->timeout_ms;
  return 0;
}

#define RPMA_HARNESS_CFG_SIZE(field)                                        \
  extern "C" int rpma_conn_cfg_set_##field(struct rpma_conn_cfg* cfg,       \
                                           uint32_t field) {                \
    if (cfg == nullptr) return RPMA_E_INVAL;                                \
    cfg->field = field;                                                     \
    return 0;                                                               \
  }                                                                         \
  extern "C" int rpma_conn_cfg_get_##field(const struct rpma_conn_cfg* cfg, \
                                           uint32_t* field) {               \
    if (cfg == nullptr || field == nullptr) return RPMA_E_INVAL;            \
    *field = cfg->field;                                                    \
    return 0;                                                               \
  }

RPMA_HARNESS_CFG_SIZE(cq_size)
RPMA_HARNESS_CFG_SIZE(rcq_size)
RPMA_HARNESS_CFG_SIZE(sq_size)
RPMA_HARNESS_CFG_SIZE(rq_size)

#undef RPMA_HARNESS_CFG_SIZE
