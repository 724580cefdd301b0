//! `coordinator --listen ADDR --data-dir DIR [--etcd-endpoints URL,...]`: the transaction coordinator and
//! cluster metadata, on its local journal or as one of several replicas on etcd.

use clap::Parser;

/// mimalloc rather than glibc's allocator: glibc hands large freed buffers (request frames)
/// back to the kernel and faults them in again for the next one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    coordinator::cli::main(coordinator::cli::Args::parse())
}
