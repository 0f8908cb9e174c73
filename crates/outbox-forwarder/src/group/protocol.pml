/*
 * The active/standby group protocol (role/mod.rs, the role loop;
 * group/lease.rs, the lock's keeper and the fence; checkpoints/, the one
 * writer of the group's log), as a Promela model checked by spin:
 * scripts/check-model.sh. The role loop's unit tests
 * (role/tests.rs) replay each counterexample below through the code,
 * with an in-memory log and lock.
 *
 * Bound: N instances (2, or 3 with -DN=3); up to 3 binlog events; faults
 * per run (MAXKILL, MAXCRASH, MAXSTOP, MAXRESTART, MAXOPER, MAXREADFAIL,
 * MAXRECREATE, each 0, 1 or 2, set with -D by scripts/check-model.sh,
 * which states the runs): a kill of the lock's connection, a crash, a clean
 * stop (hand-over), a restart, an operator's `checkpoint set`, a read of
 * the group's topic that fails, the group's topic deleted and created
 * again. Time itself is not bounded: the clock ticks for ever, and the
 * model keeps ages (since the last confirmation, since the lock was taken)
 * that stop growing once they no longer change anything. A freeze of a
 * process is any stretch in which an instance takes no step while the
 * clock ticks: every interleaving has them, so they need no bound.
 *
 * Time is a tick of a quarter lease (ha.lease_ms / 4). A producer message
 * lands within the tick it was handed over in, or expires when the clock
 * ticks (message.timeout.ms = lease / 4, config/mod.rs kafka_config); so
 * does a share in the design (its timeout at most a quarter lease,
 * group/share.rs expiry). Wall clocks are only modelled where the code
 * compares the clocks of two hosts (written_at_ms): there, a reading
 * `wall_now + skew[i]` up to MAXT.
 *
 * The default build is the design the code runs; each -D flag puts one
 * behaviour of the code back, and spin must find a counterexample for it.
 * Each is fixed in the code, and each has its unit test in
 * role/tests.rs:
 *   UNCLEAN_UNFENCED     CheckpointWriter::unclean shares without may_publish
 *   SHARE_TIMEOUT        the share producer's message.timeout.ms is ACK_WAIT
 *                        (10 s), not tied to the lease (2 s at least)
 *   HANDOVER_ANY         a hand-over less than a lease old (by the wall
 *                        clocks of two hosts) spares any holder its hold-off
 *   ADOPT_BY_CLOCK       adopt() keeps the record with the later
 *                        written_at_ms, not the group's newest by offset
 *   LATEST_ON_EMPTY      a holder with an empty store, in a group without a
 *                        record, starts at checkpoint.start = latest
 *   READ_BEFORE_HOLDOFF  the group's record is read when the lock is taken
 *                        only, not again when the hold-off ends
 *                        (Role::catch_up_after_hold_off)
 *   TERM_UNACKED         a term whose record was not acknowledged holds
 *                        off and publishes, and the lock is not confirmed
 *                        again after the record (Role::establish,
 *                        confirmed_after)
 *   RECREATED_BY_OFFSET  adopt() takes only a record at a higher offset
 *                        than the one adopted last, so a standby stops
 *                        following a recreated topic (CheckpointWriter::adopt
 *                        knows a record by its offset and content)
 *
 * The design: unclean() shares only while may_publish; a share expires
 * within a quarter lease; every term reads the group's topic, then records
 * itself on it (a "term" record, acknowledged, then the lock confirmed
 * again before publishing: the code's mark, CheckpointWriter::record_term,
 * under a key of its own, which readers of the group's checkpoint never
 * see) and only the term recorded directly after a hand-over skips the
 * hold-off; the group's newest checkpoint is the last by offset (marks
 * passed over), taken over an instance's own, and read again when the
 * hold-off ends (a read that fails then begins the term again, with a new
 * mark); a group's first start is explicit (an operator's `group start`
 * or `checkpoint set`, or a flag on one instance, spent once the group has
 * a record), and a holder with neither a store nor a group record gives
 * the lock back (Role::step_aside), as does one that cannot read the
 * group's topic (after two leases in the code; at any time in the model).
 *
 * Abstracted away, with why it cannot hide a broken property:
 *   - the fence check and the hand-over to the producer are one step (a
 *     stop between those two instructions, like a request already in
 *     librdkafka's socket buffer, is outside the model and the protocol's
 *     reach: docs/failover.md says so);
 *   - the model's term reads the group's topic after its mark lands, the
 *     code before and after (Role::establish, catch_up_after_hold_off):
 *     the model's order lets more records land between the read and the
 *     mark, so it allows every interleaving the code has;
 *   - a group's first start records its first record (the holder's own
 *     checkpoint, or checkpoint.start with --start-group, acknowledged)
 *     where the model records a mark and then, for a holder without a
 *     store, the first record: both are acknowledged, and fenced, before
 *     anything is published;
 *   - the binlog source, replicas and tails (repeats are allowed, the
 *     read-back removes them);
 *   - the lock moving to another server on a switchover: the holder steps
 *     down first (read_only in every ping, see the role loop's unit test
 *     a_holder_on_a_server_turned_read_only_steps_down), so two servers
 *     never each have a publishing holder; the model's one lock stands
 *     for it;
 *   - partitions: the group's records all carry the group's key, so they
 *     land in one partition of the topic whatever its count; the reader
 *     takes the newest of each partition's tail.
 *
 * Properties (assertions):
 *   P1 never two instances hand messages to their producers in
 *      overlapping fence windows (when one hands a message over, no other
 *      serves with an open fence or has a message that may still land);
 *   P2 a checkpoint never names a position whose events are not in Kafka
 *      (after the group's first start);
 *   P3 the group's checkpoint never goes back behind one already shared
 *      unless an operator set it: records land in increasing positions,
 *      and a term resumes from the group's newest record;
 *   P4 no instance starts at `latest` while the group has a history;
 *   P5 a frozen instance that wakes publishes nothing (no message, no
 *      share) before it knows it holds the lock (a confirmation less than
 *      half a lease old).
 */

#ifndef N
#define N        2      /* instances: 2, or 3 */
#endif
#define NONE     255
#define L        4      /* ha.lease_ms, in ticks */
#define HALF     2      /* Leadership::may_publish: confirmed < lease / 2 ago */
#define HOLD     3      /* Leadership::hold_off: lease * 3 / 4 */
#ifndef MAXE
#define MAXE     3      /* binlog events */
#endif
#define QCAP     2      /* shares queued in one instance's share producer */
#define SKEW     8      /* how far instance 1's wall clock runs ahead */
#ifndef MAXT
#define MAXT     12     /* where the model keeps clock readings */
#endif
#ifndef MAXKILL
#define MAXKILL    1
#endif
#ifndef MAXCRASH
#define MAXCRASH   1
#endif
#ifndef MAXSTOP
#define MAXSTOP    1
#endif
#ifndef MAXRESTART
#define MAXRESTART 2
#endif
#ifndef MAXOPER
#define MAXOPER    1
#endif
#ifndef MAXREADFAIL
#define MAXREADFAIL 0   /* reads of the group's topic that fail */
#endif
#ifndef MAXRECREATE
#define MAXRECREATE 0   /* the group's topic deleted and created again */
#endif

/* share.rs: message.timeout.ms of the share producer. The design: within
   a quarter lease (a share expires at the next tick); the code: ACK_WAIT
   = 10 s, five leases of the 2 s minimum: it never expires in the model. */
#ifdef SHARE_TIMEOUT
#define SHARES_EXPIRE false
#else
#define SHARES_EXPIRE true
#endif

/* Wall clocks only matter where the code compares them across hosts; the
   model then keeps the clock's reading (up to MAXT), else only ages. */
#if defined(ADOPT_BY_CLOCK) || defined(HANDOVER_ANY)
#define CLOCKS
#define WALL(i)  (wall_now + skew[i])
#else
#define WALL(i)  0
#endif

/* Record kinds on the group's topic (group/mod.rs headers). */
#define NORMAL   1      /* CheckpointWriter::write, unclean */
#define HANDOVER 2      /* CheckpointWriter::hand_over (handed_over_by): clean */
#define FIRST    3      /* CheckpointWriter::write_first (group_started_by) */
#define OPER     4      /* CheckpointWriter::set_by_operator (shared_by = operator) */
#define TERM     5      /* the design's term record: a term's mark, no checkpoint */

/* Phases of an instance (pipeline/group.rs serve_in_group). */
#define DOWN      0     /* not running: crashed, or stopped after a hand-over */
#define STANDBY   1     /* stand_by + follow_group; hold_lock's wait_until_ours */
#define ESTABLISH 2     /* holding the lock: establish_group_checkpoint */
#define HOLDOFF   3     /* sleep_until(publish_from) */
#define SERVE     4     /* serve(): resolve_start, publish, save */
#define STOPPING  5     /* clean stop: hand_over() waited for, then RELEASE_LOCK */

byte wall_now;               /* wall-clock reading base (CLOCKS builds only) */
byte skew[N];           /* per host: its wall clock minus the reference */
byte binlog;            /* events written to the binlog so far */
bool in_kafka[MAXE+1];  /* event e landed in the output topic (by anyone) */
byte origin;            /* the group's first start: events after it are its own */
bool history;           /* the group has published or recorded something */

/* The MySQL server's named lock (group/lease.rs hold_lock / GroupLock). The server
   frees it when the holder's session ends: at once on a disconnect or
   KILL, after wait_timeout = a lease of silence otherwise. */
byte owner = NONE;
#define SESSION_ALIVE(i) (cage[i] < L)   /* its last query was its last confirmation */
#define LOCK_FREE (owner == NONE || !SESSION_ALIVE(owner))

/* The group's topic, [ha] checkpoint_topic, one partition: what readers
   use of it (group/topic.rs read_group_checkpoint reads its tail). */
byte last_kind;         /* the kind of the last record */
bool g_has;             /* a checkpoint record exists (else NeverStarted) */
byte g_pos;             /* the newest checkpoint record, by offset: position */
byte g_kind;            /*   its kind */
byte g_wall;            /*   written_at_ms */
byte gmax;              /* highest position landed since the last operator set */

/* Per instance, Leadership (group/lease.rs Lease), as ages in ticks. */
byte phase[N];
bool holds[N];          /* Lease::active */
byte cage[N];           /* ticks since Lease::confirmed_at (the lock's last query), up to L */
byte hage[N];           /* ticks since Lease::taken_at, up to HOLD */
bool nohold[N];         /* publish_from = taken_at: the hold-off is skipped */
bool termed[N];         /* the design: its term record landed ... */
bool after_handover[N]; /*   directly after a hand-over */
bool fresh[N];          /*   and the lock was confirmed after that */
bool tried[N];          /* TERM_UNACKED: its term's record was handed to the producer */
bool first_flag[N];     /* the design's explicit first start, on one instance */

/* Per instance, the data path: its producer (outbox-sink) and AckWatermark. */
byte nxt[N];            /* next event to hand over; nxt - 1 - acked in flight */
byte acked[N];          /* the ack watermark: events acked in order */

/* Per instance, its sled store (CheckpointStore), as CheckpointWriter keeps it. */
bool st_has[N];
byte st_pos[N];
bool st_clean[N];       /* Checkpoint::clean: a clean stop's promise */
byte st_wall[N];        /* Checkpoint::written_at_ms */
bool st_cur[N];         /* the design: it holds the group's newest record, as taken last */
bool unclean_due[N];    /* resumed after a clean stop: unclean() comes first */
bool waitack[N];        /* in send_acked: nothing is published meanwhile */

/* Per instance, the share producer (group/share.rs CheckpointShare). */
byte sq_n[N];
byte sq_pos[N*QCAP];
byte sq_kind[N*QCAP];
byte sq_wall[N*QCAP];   /* written_at_ms; a term record's: 1 while its term lasts */

byte kills, crashes, stops, restarts, opers, readfails, recreates;
bool aside[N];          /* Leadership::step_aside: not asking for the lock until a tick */

#ifdef RECREATED_BY_OFFSET
/* The code before: adopt() kept the offset it adopted last and took only
   a record at a higher one; offsets start again in a recreated topic. */
#define MAXOFF 12
byte next_off;          /* the offset the next record gets */
byte g_off;             /* the newest checkpoint record's */
byte ad_off[N];         /* per instance: the offset adopted last ... */
bool ad_any[N];         /*   if any */
#endif
byte k;                 /* scratch */

#ifdef ADOPT_BY_CLOCK
#define TAKES(i) (!st_has[i] || g_wall > st_wall[i])   /* adopt(): by written_at_ms */
#elif defined(RECREATED_BY_OFFSET)
#define TAKES(i) (!ad_any[i] || g_off > ad_off[i])     /* adopt(): by offset alone */
#else
#define TAKES(i) (!st_cur[i])                         /* the design: the newest by offset */
#endif

/* Leadership::may_publish; the design also asks for a confirmation after
   the term's record landed. */
#if defined(HANDOVER_ANY) || defined(TERM_UNACKED)
#define MAY_PUBLISH(i) (holds[i] && cage[i] < HALF)
#else
#define MAY_PUBLISH(i) (holds[i] && cage[i] < HALF && fresh[i])
#endif
/* P5: it knows it holds the lock. */
#define KNOWS(i) (holds[i] && cage[i] < HALF)
/* P1: an instance's fence window is open while it serves and may publish,
   and while a message it handed over may still land. */
#define WINDOW(x) ((phase[x] == SERVE && MAY_PUBLISH(x)) || nxt[x] > acked[x] + 1)

#if N == 3
#define CLEAR_CUR st_cur[0] = false; st_cur[1] = false; st_cur[2] = false
#else
#define CLEAR_CUR st_cur[0] = false; st_cur[1] = false
#endif

/* The group's topic takes a record (P3: positions never go back, but for
   an operator's). */
inline append(p, kind, by, w) {
#ifdef RECREATED_BY_OFFSET
  if :: kind != TERM -> g_off = next_off :: else fi;
  if :: next_off < MAXOFF -> next_off++ :: else fi;
#endif
  /* The group started: a first-start flag is spent (Role::start_group). */
  if :: kind == FIRST -> first_flag[0] = false :: else fi;
  if
  :: kind == TERM ->
     if
     :: w == 1 && phase[by] == ESTABLISH ->
        termed[by] = true; after_handover[by] = (last_kind == HANDOVER)
     :: else
     fi
  :: kind == OPER ->
     gmax = p; history = true;
     g_has = true; g_pos = p; g_kind = kind; g_wall = w;
     CLEAR_CUR
  :: else ->
     assert(p >= gmax);   /* P3 */
     gmax = p; history = true;
     g_has = true; g_pos = p; g_kind = kind; g_wall = w;
     CLEAR_CUR
  fi;
  last_kind = kind
}

/* CheckpointWriter::adopt of the group's newest record. */
inline adopt(i) {
  if
  :: g_has && TAKES(i) ->
     st_has[i] = true; st_pos[i] = g_pos; st_wall[i] = g_wall;
     st_clean[i] = (g_kind == HANDOVER); st_cur[i] = true;
#ifdef RECREATED_BY_OFFSET
     ad_off[i] = g_off; ad_any[i] = true;
#endif
     skip
  :: else
  fi
}

/* CheckpointShare::send: queued; P5 at every share. */
inline share(i, p, kind, w) {
  printf("%d: shares %d (kind %d)\n", i, p, kind);
  assert(KNOWS(i));   /* P5 */
  if
  :: sq_n[i] < QCAP ->
     sq_pos[i*QCAP + sq_n[i]] = p; sq_kind[i*QCAP + sq_n[i]] = kind;
     sq_wall[i*QCAP + sq_n[i]] = w; sq_n[i]++
  :: else   /* the bound's queue is full: refused, counted as a failure */
  fi
}

/* P2: every event between the group's origin and `p` is in Kafka. */
inline check_acked(p) {
  k = origin + 1;
  do
  :: k <= p -> assert(in_kafka[k]); k++
  :: else -> break
  od;
  k = 0
}

/* The term ends: what the lease knew goes (Leadership::demote). */
inline forget(i) {
  holds[i] = false; fresh[i] = false; termed[i] = false; after_handover[i] = false; tried[i] = false;
  nohold[i] = false; cage[i] = 0; hage[i] = 0
}

inline demote(i) {
  forget(i); phase[i] = STANDBY
}

/* Role::step_aside: the keeper gives the lock back (RELEASE_LOCK). */
inline STEP_ASIDE(i) {
  if :: owner == i -> owner = NONE :: else fi;
  demote(i); aside[i] = true
}

/* One instance: pipeline/group.rs's role loop with group/lease.rs's lock keeper. */
proctype Instance(byte i) {
  do
  /* GroupLock::keep: a ping of the lock, several per lease. */
  :: atomic { holds[i] && phase[i] != DOWN && (cage[i] > 0 || fresh[i] != termed[i]) ->
       if
       :: owner == i && SESSION_ALIVE(i) ->
          cage[i] = 0; fresh[i] = termed[i];   /* Leadership::confirm */
          printf("%d: ping, the lock confirmed\n", i)
       :: else ->
          if :: owner == i -> owner = NONE :: else fi;
          demote(i);   /* lost the group's lock: stepping down; the producer goes */
          printf("%d: ping failed, steps down\n", i)
       fi }

  /* stand_by: follow_group into the store ... */
  :: atomic { phase[i] == STANDBY && g_has && TAKES(i) -> adopt(i) }
  /* ... and GroupLock::wait_until_ours: GET_LOCK(name, 0). */
  :: atomic { phase[i] == STANDBY && LOCK_FREE && !aside[i] ->
       owner = i;
       holds[i] = true; cage[i] = 0; hage[i] = 0;   /* Leadership::confirm */
       /* A term record of an earlier term, still queued, is not this one's. */
       if :: sq_kind[i*QCAP] == TERM -> sq_wall[i*QCAP] = 0 :: else fi;
       if :: sq_kind[i*QCAP + 1] == TERM -> sq_wall[i*QCAP + 1] = 0 :: else fi;
       phase[i] = ESTABLISH;
       printf("%d: takes the lock\n", i) }

  /* Role::step_aside: the lock given back, not asked for until a tick. */
#ifdef LATEST_ON_EMPTY
#define HAS_START(i) true
#else
#define HAS_START(i) (g_has || st_has[i] || first_flag[i])
#endif
#ifndef LATEST_ON_EMPTY
  /* The design: with no store, no group record and no first-start flag
     (Role::refuse_first_start) ... */
  :: atomic { phase[i] == ESTABLISH && !HAS_START(i) ->
       STEP_ASIDE(i); printf("%d: nothing to start the group from: steps aside\n", i) }
#endif
  /* ... and with the group's topic unreadable for two leases. */
  :: atomic { phase[i] == ESTABLISH && !termed[i] && readfails < MAXREADFAIL ->
       readfails++; STEP_ASIDE(i); printf("%d: cannot read the group's topic: steps aside\n", i) }

#ifndef HANDOVER_ANY
  /* The design: the term's record, acknowledged before anything else,
     once the group's topic was read and there is something to resume
     from. */
  :: atomic { phase[i] == ESTABLISH && !termed[i] && sq_n[i] == 0 && KNOWS(i) && HAS_START(i) ->
       share(i, 0, TERM, 1); tried[i] = true }
#endif

  /* establish_group_checkpoint, then the hold-off it decides. */
#ifdef HANDOVER_ANY
  :: atomic { phase[i] == ESTABLISH && HAS_START(i) ->
       /* Leadership::hold_off: any holder within a lease of a hand-over. */
       nohold[i] = (g_has && g_kind == HANDOVER && WALL(i) - g_wall < L);
#elif defined(TERM_UNACKED)
  /* The code before: a term whose record expired unacknowledged goes on
     to its hold-off. */
  :: atomic { phase[i] == ESTABLISH && (termed[i] || (tried[i] && sq_n[i] == 0)) && HAS_START(i) ->
       nohold[i] = termed[i] && after_handover[i];
#else
  :: atomic { phase[i] == ESTABLISH && termed[i] && HAS_START(i) ->
       /* Only the term recorded right after a hand-over skips it. */
       nohold[i] = after_handover[i];
#endif
       /* establish_group_checkpoint adopts the record it read; the design
          reads again when the hold-off ends. */
       adopt(i);
       phase[i] = HOLDOFF;
       printf("%d: establishes (group record: %d, at %d), holds off: %d\n", i, g_has, g_pos, !nohold[i]) }

  /* The hold-off ends with a read of the group's topic that fails
     (catch_up_after_hold_off false): the term begins again, holding the
     lock, with a new mark. */
  :: atomic { phase[i] == HOLDOFF && (nohold[i] || hage[i] >= HOLD) && readfails < MAXREADFAIL ->
       readfails++; termed[i] = false; after_handover[i] = false; fresh[i] = false; tried[i] = false;
       nohold[i] = false; phase[i] = ESTABLISH;
       printf("%d: cannot read the group's topic after the hold-off: begins again\n", i) }

  /* The hold-off ends: serve() starts with resolve_start. */
  :: atomic { phase[i] == HOLDOFF && (nohold[i] || hage[i] >= HOLD) ->
#ifndef READ_BEFORE_HOLDOFF
       adopt(i);
#endif
       /* P3: a term resumes from the group's newest record. */
       assert(!g_has || (st_has[i] && st_pos[i] == g_pos));
       if
       :: st_has[i] ->
          hage[i] = 0; nohold[i] = false;
          unclean_due[i] = st_clean[i];
          nxt[i] = st_pos[i] + 1; acked[i] = st_pos[i]; phase[i] = SERVE;
          printf("%d: serves from its checkpoint at %d\n", i, st_pos[i])
       :: !st_has[i] && MAY_PUBLISH(i) ->
          /* resolve_start at checkpoint.start = latest, and write_first
             (acknowledged: the model lands it at once). */
          assert(!history);   /* P4 */
          st_has[i] = true; st_pos[i] = binlog; st_clean[i] = false;
          st_wall[i] = WALL(i);
          origin = binlog;
          assert(KNOWS(i));   /* P5 */
          append(binlog, FIRST, i, WALL(i));
          st_cur[i] = true;
          hage[i] = 0; nohold[i] = false;
          nxt[i] = binlog + 1; acked[i] = binlog; phase[i] = SERVE;
          printf("%d: first start at latest = %d\n", i, binlog)
       :: else   /* waits for the fence */
       fi }

  /* resumed_after_clean_stop: unclean(), waited for, before publishing. */
  :: atomic { phase[i] == SERVE && unclean_due[i] && sq_n[i] == 0 ->
#ifdef UNCLEAN_UNFENCED
       share(i, st_pos[i], NORMAL, WALL(i)); waitack[i] = true;
#else
       if
       :: MAY_PUBLISH(i) -> share(i, st_pos[i], NORMAL, WALL(i)); waitack[i] = true
       :: else   /* not shared: the tails are read back instead */
       fi;
#endif
       st_clean[i] = false; st_wall[i] = WALL(i); st_cur[i] = false;
       unclean_due[i] = false }

  /* send_acked returns: the broker took it, or it expired. */
  :: atomic { waitack[i] && sq_n[i] == 0 -> waitack[i] = false }

  /* KafkaSink::publish: the fence asked right before the hand-over. */
  :: atomic { (phase[i] == SERVE && !unclean_due[i] && !waitack[i]
               && nxt[i] <= binlog && MAY_PUBLISH(i)) ->
       assert(KNOWS(i));   /* P5 */
       assert(i == 0 || !WINDOW(0));   /* P1 */
       assert(i == 1 || !WINDOW(1));   /* P1 */
#if N == 3
       assert(i == 2 || !WINDOW(2));   /* P1 */
#endif
       printf("%d: hands event %d to its producer\n", i, nxt[i]);
       nxt[i]++ }

  /* Forwarder::save_as: the ack watermark stored, then shared if it may publish. */
  :: atomic { phase[i] == SERVE && !unclean_due[i] && acked[i] > st_pos[i] ->
       check_acked(acked[i]);   /* P2 */
       st_pos[i] = acked[i]; st_clean[i] = false; st_wall[i] = WALL(i); st_cur[i] = false;
       if
       :: MAY_PUBLISH(i) -> share(i, st_pos[i], NORMAL, WALL(i))
       :: else
       fi }

  /* A clean stop: the drain left nothing unacked; save_as(stopping), then
     CheckpointWriter::hand_over (waited for), then RELEASE_LOCK. */
  :: atomic { (phase[i] == SERVE && !unclean_due[i] && !waitack[i] && stops < MAXSTOP
               && nxt[i] == acked[i] + 1 && acked[i] == st_pos[i]) ->
       stops++;
       st_clean[i] = MAY_PUBLISH(i); st_wall[i] = WALL(i); st_cur[i] = false;
       if
       :: MAY_PUBLISH(i) -> share(i, st_pos[i], HANDOVER, WALL(i))
       :: else
       fi;
       phase[i] = STOPPING;
       printf("%d: clean stop, hands over at %d\n", i, st_pos[i]) }
  :: atomic { phase[i] == STOPPING && sq_n[i] == 0 ->
       if :: owner == i -> owner = NONE :: else fi;
       forget(i); phase[i] = DOWN;
       printf("%d: lock released, stopped\n", i) }

  /* A restart of the process: the store is on disk, the rest is new. */
  :: atomic { phase[i] == DOWN && restarts < MAXRESTART ->
       restarts++; waitack[i] = false; unclean_due[i] = false; phase[i] = STANDBY;
       printf("%d: restarts\n", i) }
  od
}

/* The output topic acknowledges instance x's oldest message in flight. */
inline land_message(x) {
  printf("%d: event %d acked\n", x, acked[x] + 1);
  acked[x]++; in_kafka[acked[x]] = true; history = true
}

/* The group's topic appends instance x's oldest queued share. */
inline land_share(x) {
  printf("%d: its share %d (kind %d) lands on the group's topic\n", x, sq_pos[x*QCAP], sq_kind[x*QCAP]);
  append(sq_pos[x*QCAP], sq_kind[x*QCAP], x, sq_wall[x*QCAP]);
  sq_pos[x*QCAP] = sq_pos[x*QCAP + 1];
  sq_kind[x*QCAP] = sq_kind[x*QCAP + 1];
  sq_wall[x*QCAP] = sq_wall[x*QCAP + 1];
  sq_pos[x*QCAP + 1] = 0; sq_kind[x*QCAP + 1] = 0; sq_wall[x*QCAP + 1] = 0;
  sq_n[x]--
}

inline clear_queue(x) {
  sq_pos[x*QCAP] = 0; sq_kind[x*QCAP] = 0; sq_wall[x*QCAP] = 0;
  sq_pos[x*QCAP + 1] = 0; sq_kind[x*QCAP + 1] = 0; sq_wall[x*QCAP + 1] = 0
}

/* A crash: the socket closes (the lock is freed), memory is lost. */
inline crash(x) {
  printf("%d: crashes\n", x);
  crashes++;
  if :: owner == x -> owner = NONE :: else fi;
  forget(x); phase[x] = DOWN;
  nxt[x] = 1; acked[x] = 0; sq_n[x] = 0; clear_queue(x)
}

/* A tick for instance x: its ages grow (kept only while they matter),
   what its producer holds expires (message.timeout.ms), and in the
   design so do its shares. */
inline age(x) {
  aside[x] = false;
  if :: holds[x] && cage[x] < L -> cage[x]++ :: else fi;
  if :: (phase[x] == ESTABLISH || phase[x] == HOLDOFF) && hage[x] < HOLD -> hage[x]++ :: else fi;
  if
  :: phase[x] == SERVE || phase[x] == STOPPING -> nxt[x] = acked[x] + 1
  :: else -> nxt[x] = 1; acked[x] = 0
  fi;
  if :: SHARES_EXPIRE -> sq_n[x] = 0; clear_queue(x) :: else fi
}

#if N == 3
#define AGE_ALL age(0); age(1); age(2)
#else
#define AGE_ALL age(0); age(1)
#endif

/* The rest of the world: the clock, the brokers, the binlog's writers,
   faults and the operator. */
proctype World() {
  do
  /* The clock ticks a quarter lease. */
#ifdef CLOCKS
  :: atomic { wall_now < MAXT -> wall_now++; AGE_ALL; printf("-- a quarter lease passes\n") }
#else
  :: atomic { AGE_ALL; printf("-- a quarter lease passes\n") }
#endif

  :: atomic { nxt[0] > acked[0] + 1 -> land_message(0) }
  :: atomic { nxt[1] > acked[1] + 1 -> land_message(1) }
#if N == 3
  :: atomic { nxt[2] > acked[2] + 1 -> land_message(2) }
  :: atomic { sq_n[2] > 0 -> land_share(2) }
  :: atomic { crashes < MAXCRASH && phase[2] != DOWN -> crash(2) }
#endif
  :: atomic { sq_n[0] > 0 -> land_share(0) }
  :: atomic { sq_n[1] > 0 -> land_share(1) }

  /* A transaction writes an outbox row. */
  :: atomic { binlog < MAXE -> binlog++; printf("-- event %d written\n", binlog) }

  /* The lock's connection is cut (KILL, a proxy reset): the server frees
     the lock at once; the holder learns it at its next ping. */
  :: atomic { kills < MAXKILL && owner != NONE ->
       printf("%d: its lock connection is killed\n", owner); kills++; owner = NONE }

  :: atomic { crashes < MAXCRASH && phase[0] != DOWN -> crash(0) }
  :: atomic { crashes < MAXCRASH && phase[1] != DOWN -> crash(1) }

  /* The group's topic deleted and created again (an operator's, or a
     cluster's, doing): its records gone, offsets from 0. The group's
     history restarts with it (P3 counts from there, as after an
     operator's set); P2 and P4 still hold across it. */
  :: atomic { recreates < MAXRECREATE && g_has ->
       recreates++; g_has = false; last_kind = 0; gmax = 0;
#ifdef RECREATED_BY_OFFSET
       next_off = 0; g_off = 0;
#endif
       printf("-- the group's topic is recreated\n") }

  /* An operator's `checkpoint set` (set_by_operator), acknowledged: back to
     the group's first position, as a repair does. */
  :: atomic { opers < MAXOPER ->
       opers++;
       printf("-- operator: checkpoint set %d\n", origin);
       append(origin, OPER, 0, WALL(0))   /* the operator's host: instance 0's clock */
     }
  od
}

init {
  atomic {
    if
    :: /* A new group: one event before it, instance 0 flagged to start it. */
       binlog = 1; origin = 1; first_flag[0] = true;
       printf("-- a new group: one event written before it, instance 0 starts it\n")
    :: /* A single forwarder turned into a group: it published event 1
          and stopped, event 2 was written since; the group's topic is
          empty. Either instance is that forwarder. */
       if :: k = 0 :: k = 1 fi;
       st_has[k] = true; st_pos[k] = 1;
       in_kafka[1] = true; binlog = 2; origin = 0; history = true;
       printf("-- a forwarder turned into a group: instance %d published event 1, event 2 written since\n", k)
    fi;
#ifdef CLOCKS
    if :: skew[1] = 0 :: skew[1] = SKEW; printf("-- instance 1's clock runs %d ahead\n", SKEW) fi;
    st_wall[k] = WALL(k);
    wall_now = 1;   /* the store was written before the group began */
#endif
    k = 0;
    phase[0] = STANDBY; phase[1] = STANDBY; nxt[0] = 1; nxt[1] = 1;
#if N == 3
    phase[2] = STANDBY; nxt[2] = 1;
#endif
    run World();
    run Instance(0);
    run Instance(1);
#if N == 3
    run Instance(2)
#endif
  }
}
