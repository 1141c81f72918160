"""Link options for a binary that should start like /bin/true: everything but
glibc from Debian's static archives (libyaml-cpp.a, librdmacm.a, libibverbs.a
and every rdma-core provider archive, libnl, libstdc++, libgcc).

A static libibverbs loads no provider from disk: the binary must also have
//tools:static_verbs_providers (ibv_static_providers, <infiniband/verbs.h>)
among its deps, or the rdma-core backend finds no device. The dependencies'
own -lrdmacm / -libverbs / -lyaml-cpp come later on the command line and
--as-needed drops them.
"""

_PROVIDERS = [
    "bnxt_re-rdmav34",
    "cxgb4-rdmav34",
    "efa",
    "erdma-rdmav34",
    "hfi1verbs-rdmav34",
    "hns-rdmav34",
    "ipathverbs-rdmav34",
    "irdma-rdmav34",
    "mana",
    "mlx4",
    "mlx5",
    "mthca-rdmav34",
    "ocrdma-rdmav34",
    "qedr-rdmav34",
    "rxe-rdmav34",
    "siw-rdmav34",
    "vmw_pvrdma-rdmav34",
]

STATIC_RUNTIME_LINKOPTS = [
    "-Wl,--as-needed",
    "-Wl,-Bstatic",
    "-lyaml-cpp",
    "-Wl,--start-group",
    "-lrdmacm",
    "-libverbs",
] + ["-l" + p for p in _PROVIDERS] + [
    "-Wl,--end-group",
    "-lnl-route-3",
    "-lnl-3",
    "-lstdc++",
    "-Wl,-Bdynamic",
    "-static-libstdc++",
    "-static-libgcc",
]
