// Peer configuration: what one side tells the other about itself (today only
// whether RDMA writes reach its persistent memory directly), and the
// one-byte descriptor that carries it (rpma_peer_cfg_get_descriptor(3)).

#include <new>

#include "rpma/internal.h"

extern "C" int rpma_peer_cfg_new(struct rpma_peer_cfg** pcfg_ptr) {
  if (pcfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* cfg = new (std::nothrow) rpma_peer_cfg;
  if (cfg == nullptr) return RPMA_E_NOMEM;
  *pcfg_ptr = cfg;
  return 0;
}

extern "C" int rpma_peer_cfg_delete(struct rpma_peer_cfg** pcfg_ptr) {
  if (pcfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *pcfg_ptr;
  *pcfg_ptr = nullptr;
  return 0;
}

extern "C" int rpma_peer_cfg_set_direct_write_to_pmem(
    struct rpma_peer_cfg* pcfg, bool supported) {
  if (pcfg == nullptr) return RPMA_E_INVAL;
  pcfg->direct_write_to_pmem.store(supported);
  return 0;
}

extern "C" int rpma_peer_cfg_get_direct_write_to_pmem(
    const struct rpma_peer_cfg* pcfg, bool* supported) {
  if (pcfg == nullptr || supported == nullptr) return RPMA_E_INVAL;
  *supported = pcfg->direct_write_to_pmem.load();
  return 0;
}

// The descriptor is one byte, 0 or 1 (librpma 1.3's wire format, so a peer
// running the real librpma reads ours).
extern "C" int rpma_peer_cfg_get_descriptor(const struct rpma_peer_cfg* pcfg,
                                            void* desc) {
  if (pcfg == nullptr || desc == nullptr) return RPMA_E_INVAL;
  *static_cast<uint8_t*>(desc) = pcfg->direct_write_to_pmem.load() ? 1 : 0;
  return 0;
}

extern "C" int rpma_peer_cfg_get_descriptor_size(
    const struct rpma_peer_cfg* pcfg, size_t* desc_size) {
  if (pcfg == nullptr || desc_size == nullptr) return RPMA_E_INVAL;
  *desc_size = rpma_harness::internal::kPeerCfgDescriptorSize;
  return 0;
}

extern "C" int rpma_peer_cfg_from_descriptor(const void* desc, size_t desc_size,
                                             struct rpma_peer_cfg** pcfg_ptr) {
  if (desc == nullptr || pcfg_ptr == nullptr) return RPMA_E_INVAL;
  if (desc_size < rpma_harness::internal::kPeerCfgDescriptorSize) {
    rpma_harness::internal::Log(
        "peer configuration descriptor of %zu bytes (at least %zu expected)",
        desc_size, rpma_harness::internal::kPeerCfgDescriptorSize);
    return RPMA_E_INVAL;
  }
  auto* cfg = new (std::nothrow) rpma_peer_cfg;
  if (cfg == nullptr) return RPMA_E_NOMEM;
  // Any non-zero byte means supported, as librpma reads it.
  cfg->direct_write_to_pmem.store(*static_cast<const uint8_t*>(desc) != 0);
  rpma_harness::internal::LogAt(
      RPMA_LOG_LEVEL_INFO, "Direct Write To PMem is %s",
      cfg->direct_write_to_pmem.load() ? "supported" : "unsupported");
  *pcfg_ptr = cfg;
  return 0;
}
