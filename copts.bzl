"""Compiler and linker settings every rpma-harness target carries itself.

They are attributes of the targets, not .bazelrc lines, so they also apply
when the harness is an external repository of another workspace (whose
.bazelrc, not ours, is in effect) and whatever --copt/--cxxopt it uses.
"""

# C++ targets: the code is C++17 (structured bindings, std::optional, ...).
# The target's copts come after --copt/--cxxopt on the command line, so a
# consumer building with another -std still compiles our sources as C++17.
RPMA_HARNESS_CXXOPTS = ["-std=c++17"]

# linkstatic = RPMA_HARNESS_LINKSTATIC on every cc_library, cc_test and
# cc_binary. On a cc_library it means "no .so of this library": a test that
# links it (a consumer's cc_test defaults to linkstatic = False) gets our
# objects in its own executable. A Bazel _solib .so of ours would be linked
# without -libverbs, so its references to libibverbs would carry no symbol
# version and the dynamic loader would bind them to the oldest one
# (ibv_alloc_pd@IBVERBS_1.0, a compat shim that crashes on a modern context);
# linked into the executable they bind to the default @@IBVERBS_1.1 as in any
# program. This replaces the harness's own --dynamic_mode=off for consumers.
RPMA_HARNESS_LINKSTATIC = True
