// ibverbs_names.cc: libibverbs' pure functions, which programs print with
// (ibv_wc_status_str, ...) and convert rates with. The texts and values
// are the ones rdma-core 44's libibverbs/enum_strs.c and verbs.c give, so
// that a program's output on the fake reads as it does on a real NIC.

#include <infiniband/verbs.h>

#include <cstddef>

namespace {

template <size_t N>
const char* Pick(const char* const (&names)[N], int index,
                 const char* otherwise) {
  return index >= 0 && static_cast<size_t>(index) < N ? names[index]
                                                      : otherwise;
}

struct Rate {
  ibv_rate rate;
  int mult;  // 2.5 Gb/s units; 0: none (only ibv_rate_to_mbps knows it)
  int mbps;
};

constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},     {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},   {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},   {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},   {IBV_RATE_28_GBPS, 0, 28125},
    {IBV_RATE_50_GBPS, 0, 53125},     {IBV_RATE_400_GBPS, 0, 425000},
    {IBV_RATE_600_GBPS, 0, 637500},   {IBV_RATE_800_GBPS, 0, 850000},
    {IBV_RATE_1200_GBPS, 0, 1275000},
};

}  // namespace

extern "C" {

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "operation aborted",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  return Pick(kNames, status, "unknown");
}

const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {
      "unknown",           "InfiniBand channel adapter",
      "InfiniBand switch", "InfiniBand router",
      "iWARP NIC",         "usNIC",
      "usNIC UDP",         "unspecified",
  };
  return Pick(kNames, node_type, "unknown");
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {
      "PORT_NOP",   "PORT_DOWN",   "PORT_INIT",
      "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER",
  };
  return Pick(kNames, port_state, "invalid state");
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  return Pick(kNames, event, "unknown");
}

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate && r.mult != 0) return r.mult;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates) {
    if (r.mult == mult && mult != 0) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

}  // extern "C"
