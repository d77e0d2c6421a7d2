package sojourn

// The BPF object is built by bpf2go from bpf/sojourn.c and committed, so that a
// build needs no clang; `go generate ./sojourn` (clang and libbpf's headers, which
// scripts/install-deps brings) rebuilds it, and a test says when it is stale.
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -target bpfel -type hist -type qdisc_key -type conn_key -type conn_count sojourn bpf/sojourn.c
