//! `outbox-forwarder`: the command line is the library's ([`outbox_forwarder::cli`]).

use std::process::ExitCode;

/// See [`outbox_forwarder::memory`].
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    outbox_forwarder::cli::main()
}
