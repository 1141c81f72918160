"""What a Bazel workspace needs to build rpma-harness as an external repository.

In the consumer's WORKSPACE, after the repository itself:

    local_repository(
        name = "rpma_harness",
        path = "/path/to/rpma-harness",
    )

    load("@rpma_harness//:repositories.bzl", "rpma_harness_dependencies")

    rpma_harness_dependencies()

Bazel 4.2.3 (Debian's bazel-bootstrap) wants @rules_cc, @rules_java and
@remote_coverage_tools even for plain cc_* rules and would download them; the
harness carries offline stand-ins in third_party/. This macro declares each of
them unless the workspace already has a repository of that name, so a
consumer that brings its own (a real rules_cc, say) keeps it.

GoogleTest, GoogleMock, Benchmark, rdma-core, yaml-cpp and expat are Debian
-dev packages linked by name (third_party/system/BUILD, a package of this
repository, not a repository of its own): nothing to declare for them.

Compiler flags travel with the targets (copts.bzl), not with a .bazelrc, so
the harness builds with whatever flags the consumer uses.
"""

def _stand_in_impl(repository_ctx):
    # The directory of this repository's own WORKSPACE file, wherever the
    # consumer put the harness and whatever name it gave it.
    root = repository_ctx.path(Label("//:WORKSPACE")).dirname
    source = root.get_child("third_party").get_child(repository_ctx.attr.directory)
    for child in source.readdir():
        repository_ctx.symlink(child, child.basename)

_stand_in = repository_rule(
    implementation = _stand_in_impl,
    attrs = {"directory": attr.string(mandatory = True)},
    local = True,
)

# Repository name -> directory under third_party/.
_STAND_INS = {
    "rules_cc": "rules_cc",
    "rules_java": "rules_java",
    "remote_coverage_tools": "remote_coverage_tools",
}

def rpma_harness_dependencies():
    """Declares the repositories rpma-harness needs that are not declared yet."""
    for name, directory in _STAND_INS.items():
        if not native.existing_rule(name):
            _stand_in(name = name, directory = directory)
