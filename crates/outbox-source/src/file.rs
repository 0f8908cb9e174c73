//! Reading a binlog file from disk through the same decoder as the live
//! stream, compressed MySQL 8 transactions included. Used to test decoding on
//! recorded binlogs and to inspect a file the way the forwarder would read it.

use std::io::BufReader;
use std::path::Path;

use mysql_common::binlog::consts::{BinlogVersion, EventType};
use mysql_common::binlog::events::TransactionPayloadEvent;
use mysql_common::binlog::BinlogFile;
use outbox_core::{DefiniteError, SourceTransaction};

use crate::decode::{DecodeConfig, TransactionAssembler};

/// Every committed transaction of the file, in order.
pub fn read_binlog_file(
    path: &Path,
    config: DecodeConfig,
) -> Result<Vec<SourceTransaction>, DefiniteError> {
    let io_error = |e: std::io::Error| DefiniteError::Config(format!("{}: {e}", path.display()));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let reader = BufReader::new(std::fs::File::open(path).map_err(io_error)?);
    let mut binlog = BinlogFile::new(BinlogVersion::Version4, reader).map_err(io_error)?;
    let mut assembler = TransactionAssembler::new(config, file_name);
    let mut transactions = Vec::new();

    while let Some(event) = binlog.next() {
        let event = event.map_err(io_error)?;
        if let Some(tx) = assembler.handle(&event)? {
            transactions.push(tx);
        }
        if event.header().event_type_raw() == EventType::TRANSACTION_PAYLOAD_EVENT as u8 {
            let payload: TransactionPayloadEvent<'_> = event.read_event().map_err(io_error)?;
            let mut inner = payload.decompressed().map_err(io_error)?;
            while let Some(inner_event) = binlog
                .reader_mut()
                .read_decompressed(&mut inner)
                .map_err(io_error)?
            {
                if let Some(tx) = assembler.handle(&inner_event)? {
                    transactions.push(tx);
                }
            }
        }
    }
    Ok(transactions)
}
