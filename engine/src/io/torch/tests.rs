//! Unit tests of the torch reader.
