//! epochfence: the root package holds tests and examples.
