"""The example pairs and how each is run: on the fake NIC by
//examples:<name>_test (server and clients as threads of one process), and on
rxe by tools/softroce_vm/ci.sh (server and clients as processes in the VM),
both from this one list. Every program also takes ADDR PORT first."""

EXAMPLE_PAIRS = [
    # dir: examples/<dir>/{server,client}.c; clients: how many clients run at
    # once; server_args / client_args follow ADDR PORT ("%i" in a client
    # argument is the client's index, 0-based).
    {"dir": "01-connection", "clients": 1, "server_args": [], "client_args": []},
]
