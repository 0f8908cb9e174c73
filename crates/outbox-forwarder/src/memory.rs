//! How the forwarder's process takes memory.
//!
//! The binary's global allocator is mimalloc, with its `override` feature so
//! that librdkafka's C allocations use it too (see `Cargo.toml`). Programs
//! measuring the forwarder against its ceilings (`outbox-bench`) use the same
//! allocator and call [`no_transparent_huge_pages`] the same way, so that a
//! ceiling is not held back by an allocator the forwarder does not use.

/// mimalloc asks for transparent huge pages on its arenas. With THP in
/// `madvise` mode (the common distribution default) every first touch of an
/// arena region then faults in and zeroes 2 MiB, and purged 64 KiB pieces
/// break them up again: in a catch-up this tripled peak RSS (85 MiB against
/// 29) and put the kernel's page clearing among the top costs, for no
/// measurable gain. The forwarder's working set is small; 4 KiB pages it is.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers (passed as the
    // unsigned longs the variadic prctl reads) and only sets a flag of this
    // process; a failure (an old kernel) leaves THP as it was.
    unsafe {
        let one: libc::c_ulong = 1;
        let zero: libc::c_ulong = 0;
        libc::prctl(libc::PR_SET_THP_DISABLE, one, zero, zero, zero);
    }
}
