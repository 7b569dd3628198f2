//! The corruption harness: every file reader of the engine fed seeded corruptions of a valid
//! file, each case in a child process so that an abort (which no `catch_unwind` can catch)
//! is counted instead of ending the run.
//!
//! A case is one corrupt file and one reader. The parent writes the file, re-runs its own
//! test binary on the single test that serves children (`child::serve_if_child`), and reads
//! the outcome from the exit status: the reader loaded the file (harmless) or refused it
//! with an error (clean); a panic, an abort, or a runaway (past the memory cap, which
//! `setrlimit(RLIMIT_AS)` makes an allocation failure, or past the time limit) fails the run.
//!
//! - `readers`: what each reader does with a file, and the valid file it starts from.
//! - `mutate`: the seeded corruptions (bit flips, truncation, size fields, hostile numbers,
//!   deletions, duplications, and per-format well-framed edits from `semantic` and `gguf`).
//! - `child`: running one case in a child and classifying how it ended.
//! - `tally`: the per-reader counts and the table `docs/baseline.md` keeps.

pub mod child;
pub mod gguf;
pub mod mutate;
pub mod readers;
pub mod rng;
pub mod samples;
pub mod semantic;
pub mod tally;
