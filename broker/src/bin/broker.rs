//! `broker --id N --listen ADDR --coordinator ADDR --data-dir DIR [--kafka-listen ADDR]`: hosts
//! partitions, and with `--kafka-listen` serves Kafka clients too.

/// mimalloc rather than glibc's allocator: glibc hands large freed buffers (request frames)
/// back to the kernel and faults them in again for the next one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    broker::cli::main(broker::cli::Args::parse_from_command_line(std::env::args_os()))
}
