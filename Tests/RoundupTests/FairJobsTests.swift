import Foundation
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupOps
import RoundupRuntime
import RoundupTesting
import Testing

@testable import RoundupStore

/// Fair jobs: a job waiting for a worker is `queued`, and waiting never makes it stale (only a job still
/// queued `JobHeartbeat.queuedLimit` after it was queued is taken for lost); a sync is bounded in the Trello writes it
/// implies (`SyncWrites`, `ROUNDUP_SYNC_MAX_TRELLO_WRITES`). The end-to-end halves are in `SyncJobTests`.
@Suite struct FairJobsTests {
    static let t0 = Date(timeIntervalSince1970: 1_700_000_000)
    static let account = "acct"
    static let staleAfter: TimeInterval = 60

    func lease(at seconds: TimeInterval) -> JobLease { JobLease(staleAfter: Self.staleAfter, now: Self.t0.addingTimeInterval(seconds)) }

    func submit(at seconds: TimeInterval, kind: JobKind = .sync, rows: inout MemoryRows) throws -> JobSubmission {
        try lease(at: seconds).submit(
            accountID: Self.account, kind: kind, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, rows: &rows)
    }

    // MARK: The lease of a queued job

    @Test func aSubmittedJobIsQueuedUntilAWorkerStartsItThenRunningWithItsHeartbeatFromThen() throws {
        var rows = MemoryRows()
        guard case .created(let job) = try submit(at: 0, rows: &rows) else { throw StackError("not created") }
        #expect(job.status == .queued && rows.jobs[job.id]?.status == .queued)
        #expect(rows.leases[Self.account]?.jobID == job.id && rows.leases[Self.account]?.holder == JobLeaseRow.unclaimed)

        // Ten stale times later, nobody has started it: it is not stale, and it still holds the account.
        #expect(!(rows.jobs[job.id]!.isStale(now: Self.t0.addingTimeInterval(600), staleAfter: Self.staleAfter)))
        #expect(try submit(at: 600, rows: &rows) == .busy(runningJobID: job.id))
        #expect(rows.jobs[job.id]?.status == .queued)

        // A worker starts it: running, its heartbeat from now; stale only a stale time after that.
        guard case .run(let started) = try lease(at: 600).start(jobID: job.id, holder: "w1", rows: &rows) else {
            throw StackError("not started")
        }
        #expect(started.status == .running && rows.jobs[job.id]?.status == .running)
        #expect(rows.jobs[job.id]?.updatedAt == Timestamp.string(Self.t0.addingTimeInterval(600)))
        #expect(rows.leases[Self.account]?.holder == "w1")
        #expect(!(rows.jobs[job.id]!.isStale(now: Self.t0.addingTimeInterval(650), staleAfter: Self.staleAfter)))
        #expect(rows.jobs[job.id]!.isStale(now: Self.t0.addingTimeInterval(661), staleAfter: Self.staleAfter))
        #expect(try lease(at: 630).beat(jobID: job.id, holder: "w1", rows: &rows))
        try lease(at: 640).finish(jobID: job.id, status: .completed, error: nil, rows: &rows)
        #expect(rows.jobs[job.id]?.status == .completed && rows.leases[Self.account] == nil)
    }

    @Test func aQueuedJobIsTakenForLostOnlyAfterTheQueuedLimit() throws {
        let limit = JobHeartbeat.queuedLimit(staleAfter: Self.staleAfter)
        #expect(limit == 3600)
        var rows = MemoryRows()
        guard case .created(let lost) = try submit(at: 0, rows: &rows) else { throw StackError("not created") }
        // Just inside the limit the account is still busy; past it, the next submission gives the lost job up.
        #expect(try submit(at: limit - 1, rows: &rows) == .busy(runningJobID: lost.id))
        guard case .created(let next) = try submit(at: limit + 1, rows: &rows) else { throw StackError("not created after the limit") }
        #expect(rows.jobs[lost.id]?.status == .error && rows.jobs[lost.id]?.error == JobOutcome.stale.rawValue)
        #expect(rows.leases[Self.account]?.jobID == next.id)
        // Its entry turns up after all: the app was told `stale`, so it never runs.
        #expect(try lease(at: limit + 2).start(jobID: lost.id, holder: "w1", rows: &rows) == .skip(.ended(.error)))
    }

    @Test func aWorkerReachingAJobQueuedPastTheLimitGivesItUpAndReleasesTheAccount() throws {
        let limit = JobHeartbeat.queuedLimit(staleAfter: Self.staleAfter)
        var rows = MemoryRows()
        guard case .created(let job) = try submit(at: 0, rows: &rows) else { throw StackError("not created") }
        #expect(try lease(at: limit + 1).start(jobID: job.id, holder: "w1", rows: &rows) == .skip(.stale))
        #expect(rows.jobs[job.id]?.status == .error && rows.jobs[job.id]?.error == JobOutcome.stale.rawValue)
        #expect(rows.leases[Self.account] == nil)
    }

    @Test func aQueuedJobRedisDidNotTakeEndsAndAReconciliationIsQueuedWithoutALease() throws {
        var rows = MemoryRows()
        guard case .created(let job) = try submit(at: 0, rows: &rows) else { throw StackError("not created") }
        try lease(at: 1).finish(jobID: job.id, status: .error, error: "could not be queued", rows: &rows)
        #expect(rows.jobs[job.id]?.status == .error && rows.jobs[job.id]?.error == "could not be queued")
        #expect(rows.leases[Self.account] == nil)

        guard case .created(let reconcile) = try submit(at: 2, kind: .reconcile, rows: &rows) else { throw StackError("not created") }
        #expect(reconcile.status == .queued && rows.leases[Self.account] == nil)
        guard case .run(let started) = try lease(at: 3).start(jobID: reconcile.id, holder: "w1", rows: &rows) else {
            throw StackError("not started")
        }
        #expect(started.status == .running && rows.jobs[reconcile.id]?.status == .running)
    }

    @Test func operatorsSeeAQueuedJobWaitingNotAHeartbeat() throws {
        let now = Self.t0.addingTimeInterval(90)
        let record = JobRecord(
            id: "j", accountID: "a", kind: .sync, status: .queued, processed: 0, total: 3, error: nil, createdAt: Timestamp.string(Self.t0),
            updatedAt: Timestamp.string(Self.t0))
        // 90 s in the queue: under way, not stale.
        #expect(!record.isStale(now: now, after: Self.staleAfter))
        #expect(JobsReport.isUnderWay(record, now: now, staleAfter: Self.staleAfter))
        let json = JobsReport.json(record, now: now, staleAfter: Self.staleAfter)
        #expect(json["status"] == "queued" && json["stale"] == .bool(false) && json["queued_s"] == .number(90) && json["heartbeat_age_s"] == .null)
        #expect(JobsReport.line(record, now: now, staleAfter: Self.staleAfter).contains("waiting for a worker for 90 s"))
        // A running job 90 s after its last beat is stale.
        var running = record
        running.status = .running
        #expect(running.isStale(now: now, after: Self.staleAfter) && !JobsReport.isUnderWay(running, now: now, staleAfter: Self.staleAfter))
    }

    // MARK: The same on both stores

    @Test(arguments: StoreBackend.available) func aQueuedJobWaitsPastTheStaleTimeThenStartsAndEndsOnTheStore(backend: StoreBackend) async throws {
        let directory = try TestSupport.temporaryDirectory("queued")
        let store = try await TestStore.open(url: try await TestStore.makeURL(backend, in: directory))
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        let staleAfter: TimeInterval = 1
        let submission = try await store.submitJob(
            accountID: account, kind: .sync, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, staleAfter: staleAfter)
        guard case .created(let job) = submission else { throw StackError("not created: \(submission)") }
        #expect(try await store.job(accountID: account, id: job.id)?.status == .queued)

        // Twice the stale time in the queue: still queued, not stale, and still holding the account.
        try await Task.sleep(for: .milliseconds(2100))
        let waited = try #require(try await store.job(accountID: account, id: job.id))
        #expect(waited.status == .queued && !waited.isStale(staleAfter: staleAfter), "\(waited)")
        let second = try await store.submitJob(
            accountID: account, kind: .sync, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, staleAfter: staleAfter)
        #expect(second == .busy(runningJobID: job.id))

        // A worker starts it: running, and it beats and ends like any job.
        guard case .run(let started) = try await store.startJob(id: job.id, holder: "w1", staleAfter: staleAfter) else {
            throw StackError("not started")
        }
        #expect(started.status == .running)
        let running = try #require(try await store.job(accountID: account, id: job.id))
        #expect(running.status == .running && running.updatedAt > waited.updatedAt, "\(running)")
        #expect(try await store.heartbeat(jobID: job.id, holder: "w1", staleAfter: staleAfter))
        try await store.finishJob(jobID: job.id, status: .completed, error: nil)
        #expect(try await store.job(accountID: account, id: job.id)?.status == .completed)
        let third = try await store.submitJob(
            accountID: account, kind: .sync, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, staleAfter: staleAfter)
        guard case .created = third else { throw StackError("the account stayed busy: \(third)") }
    }

    // MARK: Trello writes a sync implies

    func item(_ op: SyncOp, _ fields: [String: JSONValue], changed: [String]? = nil) -> SyncItem {
        SyncItem(
            op: op, syncListID: "L", reminderID: "R", trelloCardID: nil, fields: fields, changedFields: changed ?? fields.keys.sorted(),
            modifiedAt: Self.t0)
    }

    static func links(_ count: Int) -> JSONValue { .array((0..<count).map { .object(["url": .string("https://example.com/\($0)")]) }) }

    @Test func theWritesOfEachKindOfItem() {
        #expect(SyncWrites.estimate(item(.delete, [:])) == 1)
        #expect(SyncWrites.estimate(item(.complete, [:])) == 1)
        // A create: the card carries title, notes, dates and labels; empty extras are not written.
        #expect(
            SyncWrites.estimate(item(.create, ["title": "t", "notes": "n", "due_date": "2026-01-01T00:00:00.000Z", "labels": .array(["x"])])) == 1)
        #expect(SyncWrites.estimate(item(.create, ["title": "t", "url": .null, "checklists": .array([]), "priority": .null])) == 1)
        // The finding: a create with 100 links is 101 writes; 390 of them, 39,390.
        let heavy = item(.create, ["title": "t", "attachments": Self.links(100)])
        #expect(SyncWrites.estimate(heavy) == 101)
        #expect(SyncWrites.estimate(Array(repeating: heavy, count: 390)) == 39_390)
        // Priority and level: one request; location and due reminder: one PUT; two checklists of three items: 2 + 6;
        // two links and a url: 3.
        let checklists: JSONValue = .array(
            (0..<2).map { n in
                .object(["name": .string("c\(n)"), "items": .array((0..<3).map { .object(["name": .string("i\($0)")]) })])
            })
        let full = item(
            .create,
            [
                "title": "t", "priority": "high", "priority_level": .number(1), "location": .object(["name": "home"]),
                "due_reminder_minutes": .number(15),
                "checklists": checklists, "attachments": Self.links(2), "url": "https://example.com/u",
            ])
        #expect(SyncWrites.estimate(full) == 1 + 1 + 1 + 8 + 2 + 1)
        // An update: one PUT for the card's attributes however many; a new url replaces the first link (two).
        #expect(SyncWrites.estimate(item(.update, ["title": "t", "notes": "n", "labels": .array(["x"]), "completed": true])) == 1)
        #expect(SyncWrites.estimate(item(.update, ["url": "https://example.com/u"])) == 2)
        #expect(SyncWrites.estimate(item(.update, ["url": .null])) == 1)
        // Kept links cost nothing, added and deleted ones one each; a deleted checklist is one, whatever its items.
        let attachments: JSONValue = .array([
            .object(["id": "a1", "url": "https://example.com/kept"]), .object(["id": "a2", "deleted": true]),
            .object(["url": "https://example.com/new"]),
        ])
        #expect(SyncWrites.estimate(item(.update, ["attachments": attachments])) == 2)
        let deleted: JSONValue = .array([.object(["id": "c1", "deleted": true, "items": .array([.object(["id": "i1"]), .object(["id": "i2"])])])])
        #expect(SyncWrites.estimate(item(.update, ["checklists": deleted])) == 1)
        // Only the fields an update names are written.
        #expect(SyncWrites.estimate(item(.update, ["title": "t", "attachments": Self.links(50)], changed: ["title"])) == 1)
    }

    @Test func theBoundIsASettingOf2000ByDefault() throws {
        #expect(try RoundupConfiguration(environment: [:]).syncMaxTrelloWrites == 2000)
        #expect(try RoundupConfiguration(environment: ["ROUNDUP_SYNC_MAX_TRELLO_WRITES": "0"]).syncMaxTrelloWrites == 0)
        #expect {
            try RoundupConfiguration(environment: ["ROUNDUP_SYNC_MAX_TRELLO_WRITES": "-1"])
        } throws: { error in
            (error as? ConfigurationError)?.key == "ROUNDUP_SYNC_MAX_TRELLO_WRITES"
        }
    }
}

// MARK: Turns

extension FairJobsTests {
    @Test func aYieldedJobIsQueuedAgainUnclaimedAndResumesWhereItStopped() throws {
        var rows = MemoryRows()
        guard case .created(let job) = try submit(at: 0, rows: &rows) else { throw StackError("not created") }
        guard case .run = try lease(at: 1).start(jobID: job.id, holder: "w1", rows: &rows) else { throw StackError("not started") }
        // Only its holder can give the turn back.
        #expect(try !lease(at: 2).yield(jobID: job.id, holder: "w2", rows: &rows))
        #expect(try lease(at: 2).yield(jobID: job.id, holder: "w1", rows: &rows))
        #expect(rows.jobs[job.id]?.status == .queued && rows.jobs[job.id]?.updatedAt == Timestamp.string(Self.t0.addingTimeInterval(2)))
        #expect(rows.leases[Self.account]?.jobID == job.id && rows.leases[Self.account]?.holder == JobLeaseRow.unclaimed)
        // The account stays busy; a queued job is not yielded again; any worker starts it.
        #expect(try submit(at: 3, rows: &rows) == .busy(runningJobID: job.id))
        #expect(try !lease(at: 3).yield(jobID: job.id, holder: "w1", rows: &rows))
        guard case .run(let resumed) = try lease(at: 4).start(jobID: job.id, holder: "w2", rows: &rows) else { throw StackError("not resumed") }
        #expect(resumed.status == .running && rows.leases[Self.account]?.holder == "w2")
    }

    /// The finding: four accounts' long syncs kept a fifth account's one-reminder sync from starting for minutes. Now a
    /// sync that has run its turn (`ROUNDUP_JOB_TURN_SECONDS`) gives its slot back after its current item while other
    /// jobs wait, and resumes later from where it stopped. Here one slot, a slow Trello, a 40-card sync running: a
    /// one-card sync of another account posted meanwhile ends while the long one is still unfinished, and the long
    /// one then ends with its 40 cards, each made once. `ROUNDUP_TEST_JOB_TURN_SECONDS=86400` shows the old behaviour.
    @Test(arguments: StoreBackend.available) func aLongSyncGivesItsTurnToAnotherAccountsShortOne(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"])
        stack.trello.addToken("token-long")
        stack.trello.addToken("token-short")
        let long = try await SyncSetup.make(stack, list: "Llong", board: "Blong", trelloToken: "token-long")
        let short = try await SyncSetup.make(stack, list: "Lshort", board: "Bshort", trelloToken: "token-short")
        let turn = ProcessInfo.processInfo.environment["ROUNDUP_TEST_JOB_TURN_SECONDS"] ?? "1"
        try await stack.startWorker(
            name: "w1", extra: ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0", "ROUNDUP_JOB_CONCURRENCY": "1", "ROUNDUP_JOB_TURN_SECONDS": turn])
        stack.trello.setRequestDelay(.milliseconds(150))

        let creates = (0..<40).map { long.change("create", reminder: "long-\($0)", fields: ["title": .string("Long \($0)")]) }
        let posted = try await long.post(creates)
        #expect(posted.status == .accepted, "\(posted.body)")
        let longJob = try #require(posted.json["job_id"]?.stringValue)
        let running = try await TestSupport.eventually(timeout: .seconds(20)) {
            try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(longJob)", token: long.token).json["status"] == "running"
        }
        #expect(running)

        let asked = ContinuousClock.now
        let shortEnd = try await short.sync([short.change("create", reminder: "short-1", fields: ["title": "Short"])])
        let waited = ContinuousClock.now - asked
        print("fair jobs: a one-card sync ended \(waited) after it was posted, beside a 40-card sync of another account")
        #expect(shortEnd["status"] == "completed", "\(shortEnd)")
        let longNow = try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(longJob)", token: long.token).json
        #expect(longNow["status"] != "completed", "the short sync waited for the long one to end: \(waited)")

        let longEnd = try await long.wait(job: longJob, timeout: .seconds(120))
        #expect(longEnd["status"] == "completed", "\(longEnd)")
        let results = longEnd["results"]?.arrayValue ?? []
        #expect(results.count == 40 && results.allSatisfy { $0["status"] == "ok" }, "\(results.prefix(3))")
        #expect(Set(results.compactMap { $0["trello_card_id"]?.stringValue }).count == 40)
        #expect(stack.trello.cardsCreated == 41)
        await stack.shutdown()
    }
}
