//! Security on real servers: TLS to MariaDB and MySQL in each verification mode, an
//! account that requires TLS or a client certificate, passwords kept
//! outside the configuration file, and Kafka over TLS with SASL/SCRAM.
//!
//! The TLS server runs with a certificate from a CA made for the test
//! ([`TestPki`]); its forwarder account `REQUIRE SSL`, so a session that is
//! not encrypted cannot log in at all. The secured broker is reached only
//! through a TLS front requiring a client certificate, and requires
//! SCRAM-SHA-512 authentication.
//!
//! One module per theme: [`mysql_tls`], [`caching_sha2`] (MySQL), [`secrets`],
//! [`kafka`], [`rds_iam`] (RDS's IAM sign-in), [`identifiers`] (crafted
//! schema, table and column names).

use std::time::Duration;

use harness::broker::Security;
use harness::forwarder::{check_line, failed_check, output_text, refused_run};
use harness::server::{FORWARDER_PASSWORD, FORWARDER_USER};
use harness::tls::TestPki;
use harness::workload::*;
use harness::{replaced, unique, Broker, DbServer, Flavor, ForwarderSetup, TIMEOUT};
use mysql_async::prelude::Queryable;
use tokio::sync::OnceCell;

mod caching_sha2;
mod identifiers;
mod kafka;
mod mysql_tls;
mod rds_iam;
mod secrets;
