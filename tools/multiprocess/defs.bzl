"""rpma_multiprocess_test: a server program and client programs as separate
processes on one fresh fake-NIC fabric, as a test.

    load("@rpma_harness//tools/multiprocess:defs.bzl", "rpma_multiprocess_test")

    rpma_multiprocess_test(
        name = "write_imm_two_processes_test",
        server = ":my_server",                 # a cc_binary (any executable)
        server_args = ["127.0.0.1", "7000"],
        clients = [":my_client"],              # one label per client process
        client_args = ["127.0.0.1", "7000"],   # "%i": the client's index
        scenario = "kill_client.faults",       # optional: kill rules
        faults = {"server": "deny.yaml"},      # optional: NIC-level faults
    )

It runs //tools/multiprocess:multiprocess (launcher.h): each process gets
RPMA_HARNESS_FABRIC (a fresh directory), RPMA_HARNESS_PROCESS_NAME (server,
client0, ...), and its output comes out labelled; the clients start when the
server's listener appears on the fabric (ready = "listen"; or "line:REGEX",
"delay:MS", "none"). The test passes when every process ends as expected:
exit 0, unless `expect` ({"client0": "nonzero"}) says otherwise or a kill
rule of `scenario` killed it. `scenario` is a file of kill rules, one a line:
`kill LABEL@MS` or `kill LABEL@/REGEX/` (REGEX on any "[label] line" of
output), or `kill LABEL@step:N` with `sequence`. `faults` maps a process label to a faults file (a scenario's `faults:`
list): that process alone gets RPMA_HARNESS_FAULTS (launcher
--faults LABEL=FILE). `sequence` (a seed) runs
the fabric sequenced (launcher --sequence: every NIC step of every process
in the seed's order). `launcher_args` go to the launcher as they are
(--grace, --env, --trace, ...).

Verbs programs (built against libibverbs / librdmacm, not the harness's
librpma) run on the same fake NIC through the drop-in libraries:
`verbs_dropin = True` puts //verbs_dropin:lib on every process's
LD_LIBRARY_PATH. `check` sets RPMA_HARNESS_CHECK (e.g. "strict": a usage
finding makes the process exit 66) and `personality` RPMA_HARNESS_PERSONALITY
("spec", "rxe", "siw") for every process. A program that exchanges its QP
numbers over TCP rather than rdma_cm publishes no listener: give it
`ready = "line:REGEX"` or "delay:MS".

    rpma_multiprocess_test(
        name = "verbs_write_imm_test",
        server = ":server",
        server_args = ["127.0.0.1", "7000"],
        clients = [":client"],
        client_args = ["127.0.0.1", "7000"],
        verbs_dropin = True,
        check = "strict",
    )
"""

def _quote(arg):
    # Bazel tokenizes `args` like a Bourne shell: keep each argument whole.
    return "'" + arg.replace("'", "'\\''") + "'"

def rpma_multiprocess_test(
        name,
        server,
        clients = [],
        server_args = [],
        client_args = [],
        scenario = None,
        ready = "listen",
        expect = {},
        timeout_s = 45,
        sequence = None,
        faults = {},
        launcher_args = [],
        verbs_dropin = False,
        check = None,
        personality = None,
        **kwargs):
    launcher = Label("//tools/multiprocess:multiprocess")
    runner = Label("//tools/multiprocess:run_launcher.sh")
    data = [launcher, server]
    runner_args = []
    if verbs_dropin:
        # run_launcher.sh makes the directory absolute: the processes run
        # with the test's runfiles as their working directory, but a
        # program may change it before the loader needs the path.
        dropin = Label("//verbs_dropin:lib/libibverbs.so.1")
        data += [dropin, Label("//verbs_dropin:lib/librdmacm.so.1")]
        runner_args += ["--verbs-dropin", "$(location %s)" % dropin]
    for c in clients:
        if c not in data:
            data.append(c)
    args = ["$(location %s)" % launcher, "--timeout", str(timeout_s), "--ready", ready]
    if scenario:
        data.append(scenario)
        args += ["--faults", "$(location %s)" % scenario]
    for label, file in faults.items():
        if file not in data:
            data.append(file)
        args += ["--faults", "%s=$(location %s)" % (label, file)]
    if sequence != None:
        args += ["--sequence", str(sequence)]
    for label, want in expect.items():
        args += ["--expect", "%s=%s" % (label, want)]
    if check != None:
        args += ["--env", "RPMA_HARNESS_CHECK=" + check]
    if personality != None:
        args += ["--env", "RPMA_HARNESS_PERSONALITY=" + personality]
    args += launcher_args
    args += ["$(location %s)" % server] + [_quote(a) for a in server_args]
    for c in clients:
        args += ["--", "$(location %s)" % c] + [_quote(a) for a in client_args]
    native.sh_test(
        name = name,
        srcs = [runner],
        args = runner_args + args,
        data = data,
        **kwargs
    )
