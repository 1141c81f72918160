// Connection configuration: timeouts, queue sizes, the shared completion
// channel and the shared receive queue.

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

extern "C" int rpma_conn_cfg_set_compl_channel(struct rpma_conn_cfg* cfg,
                                               bool shared) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->shared_comp_channel = shared;
  return 0;
}

extern "C" int rpma_conn_cfg_get_compl_channel(const struct rpma_conn_cfg* cfg,
                                               bool* shared) {
  if (cfg == nullptr || shared == nullptr) return RPMA_E_INVAL;
  *shared = cfg->shared_comp_channel;
  return 0;
}

// rpma_conn_cfg_set_srq(3): srq must not be NULL (a configuration without an
// SRQ is the default one).
extern "C" int rpma_conn_cfg_set_srq(struct rpma_conn_cfg* cfg,
                                     struct rpma_srq* srq) {
  if (cfg == nullptr || srq == nullptr) return RPMA_E_INVAL;
  cfg->srq = srq;
  return 0;
}

extern "C" int rpma_conn_cfg_get_srq(const struct rpma_conn_cfg* cfg,
                                     struct rpma_srq** srq_ptr) {
  if (cfg == nullptr || srq_ptr == nullptr) return RPMA_E_INVAL;
  *srq_ptr = cfg->srq;
  return 0;
}
