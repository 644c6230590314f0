//! The lock-free single-producer single-consumer ring of [`Sample`]s between the sampling
//! thread (which decides on each sample as it reads it, before pushing it here) and the
//! recorder thread, which drains it when asked.
//!
//! A thin wrapper over `rtrb` (a well-kept wait-free SPSC ring, tested with loom upstream):
//! the buffer is allocated once in [`SampleRing::new`]; [`SampleWriter::push`] never blocks
//! and never allocates, and when the reader has fallen behind and the ring is full it drops
//! the sample and counts it in an atomic, which the reader reports, so drops are visible
//! rather than hidden. [`SampleWriter::nearly_full`] tells the sampler when to wake the
//! reader.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rtrb::{Consumer, Producer, RingBuffer};
use watchdog_types::Sample;

/// Constructor of the ring's two ends.
#[derive(Debug)]
pub struct SampleRing;

impl SampleRing {
    /// A ring holding `capacity` samples (at least 1).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize) -> (SampleWriter, SampleReader) {
        let (producer, consumer) = RingBuffer::new(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        (
            SampleWriter {
                producer,
                dropped: Arc::clone(&dropped),
            },
            SampleReader { consumer, dropped },
        )
    }
}

/// The sampler's end: pushes without blocking or allocating.
#[derive(Debug)]
pub struct SampleWriter {
    producer: Producer<Sample>,
    dropped: Arc<AtomicU64>,
}

impl SampleWriter {
    /// Pushes one sample; when the ring is full, drops it, counts it and returns `false`.
    #[inline]
    pub fn push(&mut self, sample: Sample) -> bool {
        match self.producer.push(sample) {
            Ok(()) => true,
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Free slots left.
    pub fn free_slots(&self) -> usize {
        self.producer.slots()
    }

    /// Whether at most a quarter of the ring is free: time to wake the reader.
    pub fn nearly_full(&self) -> bool {
        self.producer.slots() * 4 <= self.producer.buffer().capacity()
    }

    /// Samples dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether the reader has been dropped.
    pub fn is_abandoned(&self) -> bool {
        self.producer.is_abandoned()
    }
}

/// The reader's end (the recorder thread): drains what is there into a callback.
#[derive(Debug)]
pub struct SampleReader {
    consumer: Consumer<Sample>,
    dropped: Arc<AtomicU64>,
}

impl SampleReader {
    /// Passes every sample currently in the ring to `f`, oldest first; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(Sample)) -> usize {
        let n = self.consumer.slots();
        let Ok(chunk) = self.consumer.read_chunk(n) else {
            return 0;
        };
        let (a, b) = chunk.as_slices();
        for s in a.iter().chain(b) {
            f(*s);
        }
        chunk.commit_all();
        n
    }

    /// Samples waiting.
    pub fn len(&self) -> usize {
        self.consumer.slots()
    }

    /// Whether no sample is waiting.
    pub fn is_empty(&self) -> bool {
        self.consumer.is_empty()
    }

    /// Samples the writer dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether the writer has been dropped (the sampler stopped).
    pub fn is_abandoned(&self) -> bool {
        self.consumer.is_abandoned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_types::ResourceId;

    fn s(i: u64) -> Sample {
        Sample {
            resource: ResourceId(1),
            t_ns: i,
            used: i * 10,
            limit: 100,
        }
    }

    #[test]
    fn drops_are_counted_when_full() {
        let (mut w, mut r) = SampleRing::new(4);
        for i in 0..4 {
            assert!(w.push(s(i)));
        }
        assert!(w.nearly_full());
        assert!(!w.push(s(4)));
        assert!(!w.push(s(5)));
        assert_eq!((w.dropped(), r.dropped()), (2, 2));
        let mut got = Vec::new();
        assert_eq!(r.drain(|x| got.push(x.t_ns)), 4);
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert!(r.is_empty());
        assert!(w.push(s(6)));
        assert_eq!(r.len(), 1);
        assert_eq!(r.dropped(), 2);
    }

    #[test]
    fn wraps_around_and_keeps_order_across_threads() {
        let (mut w, mut r) = SampleRing::new(64);
        let writer = std::thread::spawn(move || {
            let mut pushed = 0u64;
            for i in 0..100_000 {
                if w.push(s(i)) {
                    pushed += 1;
                }
            }
            (pushed, w.dropped())
        });
        let mut last = None;
        let mut seen = 0u64;
        loop {
            let done = r.is_abandoned();
            r.drain(|x| {
                assert!(last.is_none_or(|l| x.t_ns > l));
                last = Some(x.t_ns);
                seen += 1;
            });
            if done && r.is_empty() {
                break;
            }
        }
        let (pushed, dropped) = writer.join().unwrap();
        assert_eq!(seen, pushed);
        assert_eq!(pushed + dropped, 100_000);
    }
}
