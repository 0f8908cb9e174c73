//! Crashes, outages and bad input, with real processes and real servers.
//! Each fault test first shows the fault really happened (a repeat really
//! delivered, a connection really killed, a process really gone), then checks
//! that nothing was lost.
//!
//! One module per theme: [`kill9`], [`outages`], [`refusals`],
//! [`bad_input`], [`fallbacks`].

use std::collections::HashSet;
use std::time::{Duration, Instant};

use harness::workload::*;
use harness::{replaced, unique, Broker, DbServer, Flavor, ForwarderToml, TIMEOUT};
use mysql_async::prelude::Queryable;
use outbox_core::BinlogPosition;

mod bad_input;
mod fallbacks;
mod kill9;
mod outages;
mod refusals;
