"""The example pairs and how each is run: on the fake NIC by
//examples:<name>_test (server and clients as threads of one process), and on
rxe by tools/softroce_vm/ci.sh (server and clients as processes in the VM),
both from this one list. Every program also takes ADDR PORT first."""

EXAMPLE_PAIRS = [
    # dir: examples/<dir>/{server,client}.c; clients: how many clients run at
    # once; server_args / client_args follow ADDR PORT ("%i" in a client
    # argument is the client's index, 0-based).
    {"dir": "01-connection", "clients": 1, "server_args": [], "client_args": []},
    {"dir": "02-read", "clients": 1, "server_args": [], "client_args": []},
    {"dir": "03-write", "clients": 1, "server_args": [], "client_args": []},
    {"dir": "04-flush-to-persistent", "clients": 1, "server_args": [], "client_args": []},
    {"dir": "05-flush-gpspm", "clients": 1, "server_args": [], "client_args": []},
    {
        "dir": "06-atomic-write",
        "clients": 1,
        "server_args": ["alpha", "beta", "gamma"],
        "client_args": ["alpha", "beta", "gamma"],
    },
    {
        "dir": "07-multiple-connections",
        "clients": 3,
        "server_args": ["3"],
        "client_args": ["client-%i"],
    },
    {
        "dir": "08-messages-ping-pong",
        "clients": 1,
        "server_args": ["7", "5"],
        "client_args": ["7", "5"],
    },
    {
        "dir": "09-send-with-imm",
        "clients": 1,
        "server_args": [],
        "client_args": ["0x12345678", "hello"],
    },
    {
        "dir": "10-write-with-imm",
        "clients": 1,
        "server_args": [],
        "client_args": ["0xcafe0001", "written-with-imm"],
    },
    {
        "dir": "11-receive-completion-queue",
        "clients": 1,
        "server_args": ["100", "4"],
        "client_args": ["100", "4"],
    },
    {
        "dir": "12-srq-ping-pong",
        "clients": 3,
        "server_args": ["3", "4"],
        "client_args": ["%i000", "4"],
    },
    {
        "dir": "13-crash-consistency",
        "clients": 1,
        "server_args": ["signal-after-flush"],
        "client_args": ["signal-after-flush"],
    },
]
