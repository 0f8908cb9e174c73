use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    let broker = harness::Broker::start(false).await;
    broker.create_topic("p1", 1);
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "50")
        .set("compression.type", "lz4")
        .create()
        .unwrap();
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "x")
        .create()
        .unwrap();
    for round in 0..3 {
        let futs: Vec<_> = (0..50)
            .map(|i| {
                p.send_result(FutureRecord::to("p1").key("k").payload(&format!("m{i}")))
                    .unwrap()
            })
            .collect();
        let mut offs = vec![];
        for f in futs {
            offs.push(f.await.unwrap().unwrap().offset);
        }
        println!(
            "round {round} offsets {}..{}",
            offs[0],
            offs[offs.len() - 1]
        );
        for _ in 0..3 {
            println!(
                "  wm: {:?}",
                c.fetch_watermarks("p1", 0, Duration::from_secs(5))
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
