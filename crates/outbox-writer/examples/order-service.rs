//! `order-service`: the demo's producer. Places one order per customer
//! named, each in one transaction with its `ORDER_ACCEPTED` event, written
//! through the outbox writer into the table and columns the forwarder's
//! configuration names.
//!
//! ```sh
//! cargo run -p outbox-writer --example order-service -- \
//!     --config config/forwarder.toml --url mysql://root@127.0.0.1:3306/shop ada grace
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_writer::{NewEvent, Outbox, OutboxTable};

/// Places an order for each customer, with its outbox event.
#[derive(Parser)]
struct Cli {
    /// The forwarder's configuration: [outbox] tables and [outbox.columns].
    #[arg(long)]
    config: PathBuf,
    /// The service's own account on the primary (not the forwarder's).
    #[arg(long)]
    url: String,
    /// Each order's amount.
    #[arg(long, default_value_t = 4200)]
    amount_cents: i64,
    /// One order for each.
    #[arg(required = true)]
    customers: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = Conn::new(Opts::from_url(&cli.url)?).await?;
    let outbox = OutboxTable::from_forwarder_config_file(&cli.config)?
        .open(&mut conn)
        .await?;
    for customer in &cli.customers {
        let (order_id, event_id) = place(&mut conn, &outbox, customer, cli.amount_cents).await?;
        println!("order {order_id} for {customer}: event {event_id}");
    }
    conn.disconnect().await?;
    Ok(())
}

/// The order and its event commit together or not at all.
async fn place(
    conn: &mut Conn,
    outbox: &Outbox,
    customer: &str,
    amount_cents: i64,
) -> Result<(u64, String), Box<dyn std::error::Error>> {
    let mut tx = conn.start_transaction(Default::default()).await?;
    tx.exec_drop(
        "INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')",
        (customer, amount_cents),
    )
    .await?;
    let order_id = tx.last_insert_id().ok_or("the order got no id")?;
    let payload = serde_json::json!({
        "order_id": order_id,
        "customer": customer,
        "amount_cents": amount_cents,
    });
    let event =
        NewEvent::new("order", order_id.to_string(), "ORDER_ACCEPTED", &payload)?.version(1);
    // On an error the transaction is dropped unfinished: the server rolls
    // back the order with it.
    outbox.append(&mut tx, &event).await?;
    tx.commit().await?;
    Ok((order_id, event.id().to_owned()))
}
