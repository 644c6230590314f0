//! The watch engine: everything that decides, for one target, as a pure step
//! function. Samples and the clock go in; actions come out (write the request file,
//! signal, run the hook, notify, emit an event, flush the recording). No I/O.
#![deny(missing_docs)]

pub mod replay;
