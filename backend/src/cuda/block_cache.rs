//! Device blocks the host has freed, kept by size class for the next request of that class, and
//! the count of bytes handed out. With one stream, a block freed after its last use was queued
//! can serve the next op at once: stream order puts the new use after the old one, as in
//! PyTorch's caching allocator. This saves two driver calls (the pool's allocate and free) per
//! op, a good part of a small op's host time, which bounds a training step of thousands of
//! small kernels.

use std::collections::HashMap;

/// Requests are rounded up to a multiple of this, so nearby sizes share blocks.
const GRANULE: usize = 512;

/// Beyond this many cached bytes, freed blocks go back to the driver's pool, which can reuse
/// them for any size.
pub(crate) const CACHE_LIMIT: usize = 4 << 30;

/// The size a request of `bytes` is allocated as.
pub(crate) fn size_class(bytes: usize) -> usize {
    bytes.div_ceil(GRANULE) * GRANULE
}

#[derive(Default)]
pub(crate) struct BlockCache {
    bins: HashMap<usize, Vec<u64>>,
    cached: usize,
    /// Bytes handed out (by size class) and not freed, and the most at once since the last
    /// `reset_peak`.
    in_use: u64,
    peak: u64,
}

impl BlockCache {
    /// A cached block of class `size`, counted as handed out.
    pub fn take(&mut self, size: usize) -> Option<u64> {
        let ptr = self.bins.get_mut(&size)?.pop()?;
        self.cached -= size;
        self.handed_out(size);
        Some(ptr)
    }

    /// Counts a block of class `size` that came from the driver.
    pub fn handed_out(&mut self, size: usize) {
        self.in_use += size as u64;
        self.peak = self.peak.max(self.in_use);
    }

    /// Takes back a freed block of class `size`: kept (true) unless the cache is full, when
    /// the caller returns it to the driver.
    pub fn give_back(&mut self, ptr: u64, size: usize) -> bool {
        self.returned(size);
        if self.cached + size > CACHE_LIMIT {
            return false;
        }
        self.bins.entry(size).or_default().push(ptr);
        self.cached += size;
        true
    }

    /// Counts a block of class `size` freed to the driver directly.
    pub fn returned(&mut self, size: usize) {
        self.in_use = self.in_use.saturating_sub(size as u64);
    }

    /// Every cached block, for the driver to take back (before retrying an allocation that
    /// ran out of memory).
    pub fn drain(&mut self) -> Vec<u64> {
        self.cached = 0;
        self.bins.drain().flat_map(|(_, v)| v).collect()
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    pub fn reset_peak(&mut self) {
        self.peak = self.in_use;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_block_serves_the_next_request_of_its_class_only() {
        let mut c = BlockCache::default();
        c.handed_out(size_class(1000));
        assert!(c.give_back(0x1000, size_class(1000)));
        assert_eq!(c.take(size_class(2000)), None);
        assert_eq!(size_class(1000), size_class(1024));
        assert_eq!(c.take(size_class(1024)), Some(0x1000));
        assert_eq!(c.take(size_class(1024)), None);
    }

    #[test]
    fn the_peak_counts_blocks_handed_out_not_blocks_cached() {
        let mut c = BlockCache::default();
        c.handed_out(1024);
        c.handed_out(512);
        assert!(c.give_back(1, 1024));
        assert_eq!(c.peak(), 1536);
        c.reset_peak();
        assert_eq!(c.peak(), 512);
        assert_eq!(c.take(1024), Some(1));
        assert_eq!(c.peak(), 1536);
    }

    #[test]
    fn a_full_cache_hands_blocks_back_and_drain_empties_it() {
        let mut c = BlockCache::default();
        c.handed_out(CACHE_LIMIT);
        c.handed_out(512);
        assert!(c.give_back(1, CACHE_LIMIT));
        assert!(!c.give_back(2, 512));
        assert_eq!(c.drain(), vec![1]);
        assert_eq!(c.take(CACHE_LIMIT), None);
        assert!(c.give_back(3, 512));
    }
}
