// Package dispatcher is pgoutbox's runtime: producers' Enqueue inside the
// business transaction, and the dispatch loop that claims messages under a
// lease, publishes them outside any transaction, and finalizes them with
// fenced writes (WHERE id = ? AND status = 'processing' AND lease_version = ?).
//
// The package calls only the generated db package; the SQL it runs is the
// annotated queries/ folder.
//
// # Reading the loop
//
// The loop claim → publish → fenced finalize is one file, loop.go, in that
// order:
//   - claim: claimLoop, a short transaction that commits before anything is
//     published;
//   - publish: runJob, outside any transaction, within the lease;
//   - finalize: writeResults, every write fenced by the claim's token, in
//     batches.
//
// Around it: Run and New in dispatcher.go, classify and the heartbeat in
// worker.go, the finalizer's batching in finalizer.go, the recovery lanes in
// isolate.go, the claim cursor in window.go.
//
// # Each guarantee, its statement and its test
//
// Each line names where the guarantee is kept, the commented query that
// keeps it and the test that shows it (the package the test is in, in
// brackets). A test of this package checks that every name here exists.
//   - Ownership outlives the claim's COMMIT in columns; lease_version, the
//     fencing token, is + 1 on every claim. code: claimLoop
//     (dispatcher/loop.go); query: OutboxClaimWindow
//     (queries/window.sql); test:
//     TestClaim_TwoOpenTransactionsGetDifferentRowsAndRollbackRestoresAll
//     [queries].
//   - A publish runs outside any transaction and stops when its lease is lost.
//     code: runJob (dispatcher/loop.go); query: OutboxExtendLease
//     (queries/lease.sql); test: TestHeartbeat_LostLeaseCancelsThePublish
//     [dispatcher].
//   - A worker whose lease was taken over writes nothing: 0 rows, the newer
//     owner's row unchanged. code: writeResults (dispatcher/loop.go);
//     query: OutboxMarkDoneMany (queries/finalize.sql); test:
//     TestSlowPublisher_TakeoverFencesTheStaleFinalize [dispatcher];
//     test: TestFencedWrites_StaleVersionChangesNothing [queries].
//   - Outcomes: done; retryable to pending after a full-jitter backoff (dead
//     when attempts are exhausted); a business defer refunds the attempt;
//     permanent to dead. code: classify (dispatcher/worker.go); code:
//     FullJitter (dispatcher/backoff.go); query: OutboxFinalizeMany
//     (queries/finalize.sql); test: TestOutcomes_EachClassLandsInTheRightState
//     [dispatcher]; test: TestDefer_RefundsTheAttemptAndMovesAvailableAt
//     [queries].
//   - Attempts count at claim time, so a message that crashes every worker
//     dies at max attempts, a grace after its lease expired. code:
//     recoverOnce (dispatcher/isolate.go); query: OutboxReap
//     (queries/claim.sql); test:
//     TestClaimWithoutFinalizeThreeTimes_ReapedDeadAtMaxAttempts [queries];
//     test: TestReap_LeavesALateOwnerItsGracePeriod [dispatcher].
//   - An expired lease is recovered alone, in the recovery lane. code:
//     recoverOnce (dispatcher/isolate.go); query: OutboxClaimExpired
//     (queries/isolate.sql); test:
//     TestRecovery_ExpiredLeaseLockedDuringPassesIsRecoveredByTheFullPass
//     [dispatcher].
//   - Ordered: only an aggregate's head is claimed, in the commit order of
//     the producing transactions; a dead head blocks its aggregate. query:
//     OutboxClaimOrderedWindow (queries/window.sql); test:
//     TestClaimOrderedWindow_HeadsUnderConcurrentProducersAndEveryOutcome
//     [queries]; test: TestOrdered_FourDispatchersPublishInIDOrderPerAggregate
//     [dispatcher].
//   - Every publisher passes an idempotency key unique beyond one table: the
//     outbox id, with a source naming the database and the table. code:
//     DefaultSource (dispatcher/source.go); test:
//     TestDefaultSource_DiffersBetweenOutboxesAndNamesTheDatabaseAndTable
//     [dispatcher].
package dispatcher
