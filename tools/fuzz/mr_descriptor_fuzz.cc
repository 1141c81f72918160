// mr_descriptor_fuzz.cc: MR descriptors as a peer could send them.
//
// The input is a descriptor (all of it is passed as `desc`, whatever its
// length) optionally followed by a write request. Checked:
//   - DecodeMrDescriptor and rpma_mr_remote_from_descriptor agree; a decoded
//     descriptor re-encodes to the same 21 bytes and its getters return its
//     fields;
//   - a write with imm through the decoded region (rpma API, fake NIC), at
//     fuzzed offsets and lengths, touches no byte of the responder's buffer
//     outside its registered region (the buffer has guard pages on both
//     sides), whatever the descriptor claims.
// Input layout: [21+ bytes descriptor][tail: 1 byte how to aim, 4 bytes
// dst offset, 4 bytes src offset, 2 bytes length]. The tail is read from the
// last 11 bytes when the input is at least 32 bytes long.

#include <librpma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "nic/fake_nic.h"
#include "rpma/harness.h"
#include "rpma/mr_descriptor.h"
#include "tests/guarded_buffer.h"
#include "tools/fuzz/byte_reader.h"
#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

constexpr size_t kBuffer = 4096;
constexpr size_t kDstOffset = 512;  // the registered part of the dst buffer
constexpr size_t kDstLength = 1024;
constexpr size_t kTail = 11;

[[noreturn]] void Violation(const char* what) {
  fprintf(stderr, "mr_descriptor_fuzz: invariant broken: %s\n", what);
  abort();
}

void CheckDecoding(const uint8_t* data, size_t size) {
  MrDescriptor decoded{};
  const bool ok = DecodeMrDescriptor(data, size, &decoded);
  rpma_mr_remote* remote = nullptr;
  const int ret = rpma_mr_remote_from_descriptor(data, size, &remote);
  if (ok != (ret == 0)) Violation("decoder and rpma API disagree");
  if (!ok) {
    if (remote != nullptr) Violation("output written on failure");
    return;
  }
  uint8_t again[kMrDescriptorSize];
  EncodeMrDescriptor(decoded, again);
  if (std::memcmp(again, data, kMrDescriptorSize) != 0) {
    Violation("re-encoding differs");
  }
  size_t got_size = 0;
  int flush_type = -1;
  if (rpma_mr_remote_get_size(remote, &got_size) != 0 ||
      got_size != decoded.size) {
    Violation("rpma_mr_remote_get_size");
  }
  if (rpma_mr_remote_get_flush_type(remote, &flush_type) != 0 ||
      flush_type != (decoded.usage & (RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
                                      RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT))) {
    Violation("rpma_mr_remote_get_flush_type");
  }
  if (rpma_mr_remote_delete(&remote) != 0 || remote != nullptr) {
    Violation("rpma_mr_remote_delete");
  }
}

uint8_t Pattern(size_t i) { return static_cast<uint8_t>(i * 29 + 3); }

// A connected rpma pair on a fresh fake NIC (manual progress); the server
// exposes [kDstOffset, +kDstLength) of a guarded buffer.
void WriteThroughDescriptor(const uint8_t* data, size_t size) {
  ByteReader tail(data + size - kTail, kTail);
  const uint8_t aim = tail.U8();
  const uint32_t dst_offset = tail.U32();
  const uint32_t src_offset = tail.U32() % (kBuffer + 64);
  const uint16_t length = tail.U16();

  static GuardedBuffer* src_buf = new GuardedBuffer(kBuffer);
  static GuardedBuffer* dst_buf = new GuardedBuffer(kBuffer);
  for (size_t i = 0; i < kBuffer; ++i) {
    src_buf->data()[i] = static_cast<uint8_t>(~i);
    dst_buf->data()[i] = Pattern(i);
  }
  auto nic = std::make_shared<FakeNic>();
  ScopedBackend use(nic);
  ibv_context* dev = nullptr;
  rpma_peer* peer = nullptr;
  rpma_mr_local* src_mr = nullptr;
  rpma_mr_local* dst_mr = nullptr;
  rpma_mr_local* recv_mr = nullptr;
  static char recv_buf[64];
  rpma_ep* ep = nullptr;
  rpma_conn_req* req = nullptr;
  rpma_conn_req* server_req = nullptr;
  rpma_conn* client = nullptr;
  rpma_conn* server = nullptr;
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  if (rpma_utils_get_ibv_context("10.8.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                 &dev) ||
      rpma_peer_new(dev, &peer) ||
      rpma_mr_reg(peer, src_buf->data(), kBuffer, RPMA_MR_USAGE_WRITE_SRC,
                  &src_mr) ||
      rpma_mr_reg(peer, dst_buf->data() + kDstOffset, kDstLength,
                  RPMA_MR_USAGE_WRITE_DST, &dst_mr) ||
      rpma_mr_reg(peer, recv_buf, sizeof(recv_buf), RPMA_MR_USAGE_RECV,
                  &recv_mr) ||
      rpma_ep_listen(peer, "10.8.0.1", "7500", &ep) ||
      rpma_conn_req_new(peer, "10.8.0.1", "7500", nullptr, &req) ||
      rpma_conn_req_connect(&req, nullptr, &client) ||
      rpma_ep_next_conn_req(ep, nullptr, &server_req) ||
      rpma_conn_req_recv(server_req, recv_mr, 0, sizeof(recv_buf), nullptr) ||
      rpma_conn_req_connect(&server_req, nullptr, &server) ||
      // The active side reads its ESTABLISHED first (that sends the RTU
      // which establishes the passive side).
      rpma_conn_next_event(client, &event) ||
      rpma_conn_next_event(server, &event)) {
    Violation("could not build the rpma pair");
  }

  // Aim the descriptor: bit 0 takes raddr relative to the real region, bit 1
  // uses the real rkey (otherwise the bytes are what the peer claims).
  uint8_t desc[kMrDescriptorSize];
  std::memcpy(desc, data, kMrDescriptorSize);
  MrDescriptor real{};
  uint8_t real_desc[kMrDescriptorSize];
  rpma_mr_get_descriptor(dst_mr, real_desc);
  DecodeMrDescriptor(real_desc, sizeof(real_desc), &real);
  MrDescriptor claimed{};
  if (DecodeMrDescriptor(desc, sizeof(desc), &claimed)) {
    if (aim & 1) {
      claimed.raddr =
          real.raddr + (claimed.raddr % (2 * kDstLength)) - kDstLength / 2;
    }
    if (aim & 2) claimed.rkey = real.rkey;
    EncodeMrDescriptor(claimed, desc);
    rpma_mr_remote* remote = nullptr;
    if (rpma_mr_remote_from_descriptor(desc, sizeof(desc), &remote) != 0) {
      Violation("a decodable descriptor was refused");
    }
    const size_t dst_off =
        (aim & 4) ? dst_offset % (2 * kDstLength) : dst_offset;
    const size_t len = length % (kBuffer + 64);
    const size_t src_off = (aim & 8) ? src_offset : 0;
    rpma_write_with_imm(client, remote, dst_off, src_mr, src_off, len,
                        RPMA_F_COMPLETION_ALWAYS, 0x77, nullptr);
    nic->RunUntilIdle();
    ibv_wc wc;
    int got = 0;
    rpma_cq* cq = nullptr;
    rpma_conn_get_cq(client, &cq);
    while (rpma_cq_get_wc(cq, 1, &wc, &got) == 0) {
    }
    rpma_conn_get_cq(server, &cq);
    while (rpma_cq_get_wc(cq, 1, &wc, &got) == 0) {
    }
    rpma_mr_remote_delete(&remote);
  }
  for (size_t i = 0; i < kBuffer; ++i) {
    const bool registered = i >= kDstOffset && i < kDstOffset + kDstLength;
    if (!registered && dst_buf->data()[i] != Pattern(i)) {
      Violation("a byte outside the registered region changed");
    }
  }

  rpma_conn_disconnect(client);
  if (rpma_conn_delete(&client) || rpma_conn_delete(&server) ||
      rpma_ep_shutdown(&ep) || rpma_mr_dereg(&recv_mr) ||
      rpma_mr_dereg(&dst_mr) || rpma_mr_dereg(&src_mr) ||
      rpma_peer_delete(&peer)) {
    Violation("teardown failed");
  }
}

}  // namespace

int FuzzMrDescriptor(const uint8_t* data, size_t size) {
  // Refused writes are logged by the rpma layer; not news here.
  static bool quiet = [] {
    SetLogSink([](const std::string&) {});
    return true;
  }();
  (void)quiet;
  CheckDecoding(data, size);
  if (size >= kMrDescriptorSize + kTail) WriteThroughDescriptor(data, size);
  return 0;
}

}  // namespace rpma_harness
