//! The Kafka client layer the forwarder, its tools and the inbox share:
//! every client is made and signed in here, and librdkafka's reports come
//! back through here.
//!
//! - [`oauth`]: SASL/OAUTHBEARER tokens ([`ClientAuth`]), from a command
//!   or signed for Amazon MSK's IAM sign-in.
//! - [`connection`]: why the brokers refused a connection, in words that
//!   say what to fix.
//! - [`watermarks()`]: where each partition of a topic begins and ends;
//! - [`reader()`]: a consumer of assigned partitions, signed in;
//!   [`producer()`]: a producer with its own sign-in and context;
//!   [`admin()`]: an admin client, signed in (rdkafka never serves its
//!   token refresh).
//! - [`signing`]: signed messages (`kafka.signing_key`), made by the
//!   producer and verified by every reader.
//! - [`log`]: librdkafka's log lines in `tracing`; [`blocking`]: blocking
//!   client work called from async code.

pub mod admin;
pub mod blocking;
pub mod connection;
pub mod log;
pub mod oauth;
pub mod producer;
pub mod reader;
pub mod signing;
pub mod watermarks;

pub use admin::admin;
pub use connection::{refusal_fix, shown, ConnectionContext, Refusal};
pub use log::log_librdkafka;
pub use oauth::{AwsMskIam, ClientAuth, TokenCommand};
pub use producer::producer;
pub use reader::reader;
pub use signing::{Signing, MIN_KEY_BYTES};
pub use watermarks::watermarks;
