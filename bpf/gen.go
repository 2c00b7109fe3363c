// Package bpf holds allot's eBPF C sources and the Go bindings bpf2go
// generates from them. The generated object (snat_bpfel.o) and bindings
// (snat_bpfel.go) are committed so that building allot needs no clang;
// `make generate` (or `go generate ./bpf/`) rebuilds them and needs clang,
// llvm and libbpf-dev from Debian.
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type ct_key -type ct_val -type lpm_key -type snat_cfg -type global_cfg Snat snat.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
