// write_imm_demo: a librpma server and client in one process exchanging
// writes with immediate data, each completion printed as it arrives.
//
// It is an ordinary librpma program (only <librpma.h>), so it runs on
// whichever NIC RPMA_HARNESS_BACKEND selects: the fake NIC by default,
// rdma-core with RPMA_HARNESS_BACKEND=rdma-core on a host with an RDMA device.
//
//   bazel run //tools:write_imm_demo -- [--addr A] [--port P] [--count N]
//                                       [--size BYTES] [--imm FIRST]

#include <arpa/inet.h>
#include <librpma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string addr = "192.168.0.1";
  std::string port = "7204";
  int count = 3;
  size_t size = 64;
  uint32_t imm = 0x1000;
};

const char* StatusName(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "SUCCESS";
    case IBV_WC_LOC_PROT_ERR:
      return "LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "WR_FLUSH_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "REM_ACCESS_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR_RETRY_EXC_ERR";
    default:
      return "ERROR";
  }
}

const char* OpcodeName(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RECV:
      return "RECV";
    default:
      return "OTHER";
  }
}

void PrintCompletion(const char* who, const ibv_wc& wc) {
  std::printf("%-6s completion: %-18s status %-14s wr_id 0x%llx byte_len %u",
              who, OpcodeName(wc.opcode), StatusName(wc.status),
              static_cast<unsigned long long>(wc.wr_id), wc.byte_len);
  if (wc.wc_flags & IBV_WC_WITH_IMM) {
    std::printf(" imm 0x%08x", ntohl(wc.imm_data));
  }
  std::printf(" qp %u\n", wc.qp_num);
  std::fflush(stdout);
}

// Exits with a readable message when a librpma call fails.
void Check(int ret, const char* what) {
  if (ret == 0) return;
  std::fprintf(stderr, "write_imm_demo: %s failed: %s (%d)\n", what,
               rpma_err_2str(ret), ret);
  std::exit(1);
}

ibv_wc NextCompletion(rpma_cq* cq) {
  ibv_wc wc;
  int got = 0;
  int ret;
  while ((ret = rpma_cq_get_wc(cq, 1, &wc, &got)) == RPMA_E_NO_COMPLETION) {
    Check(rpma_cq_wait(cq), "rpma_cq_wait");
  }
  Check(ret, "rpma_cq_get_wc");
  return wc;
}

void ExpectEvent(rpma_conn* conn, rpma_conn_event expected, const char* who) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  Check(rpma_conn_next_event(conn, &event), "rpma_conn_next_event");
  std::printf("%-6s connection: %s\n", who, rpma_utils_conn_event_2str(event));
  if (event != expected) {
    std::fprintf(stderr, "write_imm_demo: expected %s\n",
                 rpma_utils_conn_event_2str(expected));
    std::exit(1);
  }
}

bool Server(const Options& o, std::promise<void>* listening) {
  ibv_context* dev;
  rpma_peer* peer;
  Check(rpma_utils_get_ibv_context(o.addr.c_str(), RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                   &dev),
        "rpma_utils_get_ibv_context (server)");
  Check(rpma_peer_new(dev, &peer), "rpma_peer_new");
  std::vector<char> dst(o.size * o.count, 0);
  char recv_buf[8];
  rpma_mr_local *dst_mr, *recv_mr;
  Check(rpma_mr_reg(peer, dst.data(), dst.size(), RPMA_MR_USAGE_WRITE_DST,
                    &dst_mr),
        "rpma_mr_reg (dst)");
  Check(rpma_mr_reg(peer, recv_buf, sizeof(recv_buf), RPMA_MR_USAGE_RECV,
                    &recv_mr),
        "rpma_mr_reg (recv)");
  rpma_ep* ep;
  Check(rpma_ep_listen(peer, o.addr.c_str(), o.port.c_str(), &ep),
        "rpma_ep_listen");
  std::printf("server listening on %s:%s\n", o.addr.c_str(), o.port.c_str());
  listening->set_value();

  rpma_conn_req* req;
  Check(rpma_ep_next_conn_req(ep, nullptr, &req), "rpma_ep_next_conn_req");
  // Every write with imm consumes one receive: post the first before
  // accepting so it cannot arrive to an empty receive queue.
  Check(rpma_conn_req_recv(req, recv_mr, 0, sizeof(recv_buf), nullptr),
        "rpma_conn_req_recv");
  uint8_t desc[21];
  Check(rpma_mr_get_descriptor(dst_mr, desc), "rpma_mr_get_descriptor");
  rpma_conn_private_data pdata{desc, sizeof(desc)};
  rpma_conn* conn;
  Check(rpma_conn_req_connect(&req, &pdata, &conn), "rpma_conn_req_connect");
  ExpectEvent(conn, RPMA_CONN_ESTABLISHED, "server");
  rpma_cq* cq;
  Check(rpma_conn_get_cq(conn, &cq), "rpma_conn_get_cq");

  bool ok = true;
  for (int i = 0; i < o.count; ++i) {
    ibv_wc wc = NextCompletion(cq);
    PrintCompletion("server", wc);
    if (i + 1 < o.count) {
      Check(rpma_recv(conn, recv_mr, 0, sizeof(recv_buf), nullptr),
            "rpma_recv");
    }
    const size_t offset = static_cast<size_t>(i) * o.size;
    bool data_ok = wc.status == IBV_WC_SUCCESS;
    for (size_t b = 0; data_ok && b < o.size; ++b) {
      data_ok = dst[offset + b] == static_cast<char>('a' + (i + b) % 26);
    }
    std::printf("server data  : %zu bytes at offset %zu %s\n", o.size, offset,
                data_ok ? "match what the client wrote" : "DO NOT MATCH");
    ok = ok && data_ok && ntohl(wc.imm_data) == o.imm + i;
  }
  ExpectEvent(conn, RPMA_CONN_CLOSED, "server");
  Check(rpma_conn_disconnect(conn), "rpma_conn_disconnect");
  Check(rpma_conn_delete(&conn), "rpma_conn_delete");
  Check(rpma_ep_shutdown(&ep), "rpma_ep_shutdown");
  Check(rpma_mr_dereg(&recv_mr), "rpma_mr_dereg");
  Check(rpma_mr_dereg(&dst_mr), "rpma_mr_dereg");
  Check(rpma_peer_delete(&peer), "rpma_peer_delete");
  return ok;
}

bool Client(const Options& o) {
  ibv_context* dev;
  rpma_peer* peer;
  Check(rpma_utils_get_ibv_context(o.addr.c_str(), RPMA_UTIL_IBV_CONTEXT_REMOTE,
                                   &dev),
        "rpma_utils_get_ibv_context (client)");
  Check(rpma_peer_new(dev, &peer), "rpma_peer_new");
  std::vector<char> src(o.size * o.count);
  for (int i = 0; i < o.count; ++i) {
    for (size_t b = 0; b < o.size; ++b) {
      src[i * o.size + b] = static_cast<char>('a' + (i + b) % 26);
    }
  }
  rpma_mr_local* src_mr;
  Check(rpma_mr_reg(peer, src.data(), src.size(), RPMA_MR_USAGE_WRITE_SRC,
                    &src_mr),
        "rpma_mr_reg (src)");
  rpma_conn_req* req;
  Check(rpma_conn_req_new(peer, o.addr.c_str(), o.port.c_str(), nullptr, &req),
        "rpma_conn_req_new");
  rpma_conn* conn;
  Check(rpma_conn_req_connect(&req, nullptr, &conn), "rpma_conn_req_connect");
  ExpectEvent(conn, RPMA_CONN_ESTABLISHED, "client");
  rpma_conn_private_data pdata;
  Check(rpma_conn_get_private_data(conn, &pdata), "rpma_conn_get_private_data");
  rpma_mr_remote* dst;
  Check(rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst),
        "rpma_mr_remote_from_descriptor");
  rpma_cq* cq;
  Check(rpma_conn_get_cq(conn, &cq), "rpma_conn_get_cq");

  bool ok = true;
  for (int i = 0; i < o.count; ++i) {
    const size_t offset = static_cast<size_t>(i) * o.size;
    std::printf(
        "client post  : write_with_imm %zu bytes to offset %zu, "
        "imm 0x%08x\n",
        o.size, offset, o.imm + i);
    Check(rpma_write_with_imm(conn, dst, offset, src_mr, offset, o.size,
                              RPMA_F_COMPLETION_ALWAYS, o.imm + i,
                              reinterpret_cast<void*>(uintptr_t{0x100} + i)),
          "rpma_write_with_imm");
    ibv_wc wc = NextCompletion(cq);
    PrintCompletion("client", wc);
    ok = ok && wc.status == IBV_WC_SUCCESS;
  }
  Check(rpma_conn_disconnect(conn), "rpma_conn_disconnect");
  ExpectEvent(conn, RPMA_CONN_CLOSED, "client");
  Check(rpma_conn_delete(&conn), "rpma_conn_delete");
  Check(rpma_mr_remote_delete(&dst), "rpma_mr_remote_delete");
  Check(rpma_mr_dereg(&src_mr), "rpma_mr_dereg");
  Check(rpma_peer_delete(&peer), "rpma_peer_delete");
  return ok;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "write_imm_demo: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--addr") {
      o.addr = value();
    } else if (arg == "--port") {
      o.port = value();
    } else if (arg == "--count") {
      o.count = std::atoi(value().c_str());
    } else if (arg == "--size") {
      o.size = std::strtoull(value().c_str(), nullptr, 0);
    } else if (arg == "--imm") {
      o.imm = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 0));
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: write_imm_demo [--addr A] [--port P] [--count N] "
          "[--size BYTES] [--imm FIRST]\n"
          "A librpma server and client exchange N writes with immediate data\n"
          "on the NIC RPMA_HARNESS_BACKEND selects (default: the fake NIC).\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "write_imm_demo: unknown argument %s (try --help)\n",
                   arg.c_str());
      std::exit(2);
    }
  }
  if (o.count < 1 || o.size < 1) {
    std::fprintf(stderr, "write_imm_demo: --count and --size must be >= 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  const char* backend = std::getenv("RPMA_HARNESS_BACKEND");
  std::printf("backend: %s\n", backend ? backend : "fake (default)");
  std::promise<void> listening;
  auto server =
      std::async(std::launch::async, Server, std::cref(o), &listening);
  listening.get_future().wait();
  bool client_ok = Client(o);
  bool server_ok = server.get();
  std::printf("%d writes with imm of %zu bytes: %s\n", o.count, o.size,
              client_ok && server_ok ? "all completed and verified" : "FAILED");
  return client_ok && server_ok ? 0 : 1;
}
