// static_verbs_probe_test: a binary linked as the scenario runner is
// (tools/static_verbs.bzl: libibverbs and every provider static) finds the
// VM's rxe device and can open it. Without //tools:static_verbs_providers a
// static libibverbs lists no device at all, and `scenario --backend
// rdma-core` would fail on every real host. Manual: runs in the VM.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>

namespace {

TEST(StaticVerbs, FindsAndOpensTheRxeDevice) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1) << "a static libibverbs with no provider registered";
  bool rxe = false;
  for (int i = 0; i < n; ++i) {
    rxe = rxe || std::string(ibv_get_device_name(list[i])).rfind("rxe", 0) == 0;
  }
  EXPECT_TRUE(rxe);
  ibv_context* ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr{};
  EXPECT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_GT(attr.max_qp, 0);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
}

}  // namespace
