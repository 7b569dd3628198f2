//! The synthetic two-spirals classification set (seeded).
