import Foundation
import RoundupCore
import Testing

@testable import RoundupPostgres
@testable import RoundupStore

/// The store's rules run without a database: each table is a list of cases, run against `MemoryRows` (or the rule's
/// pure function). The same rules run on SQLite and PostgreSQL in the rest of the suite.
@Suite struct StoreRulesTests {
    static let t0 = Date(timeIntervalSince1970: 1_700_000_000)
    static let account = "acct"
    static let list = "list"

    // MARK: The account update

    struct AccountCase: Sendable, CustomTestStringConvertible {
        var testDescription: String
        var update: AccountUpdate
        /// What the stored account becomes, from `base`.
        var expect: @Sendable (inout AccountDetails) -> Void
    }

    static let base = AccountDetails(
        id: "acct", trelloAPIKey: "key-1", trelloToken: "token-1", trelloWebhookSecret: "secret-1", conflictPolicy: .manual, deleteMode: .archive,
        createdAt: "2026-01-01T00:00:00.000Z", updatedAt: "2026-01-01T00:00:00.000Z", needsAttention: .trelloTokenRevoked)

    static let accountCases: [AccountCase] = [
        AccountCase(testDescription: "nothing given keeps everything, the flag too", update: AccountUpdate()) { _ in },
        AccountCase(testDescription: "a new token replaces the old and clears the flag", update: AccountUpdate(trelloToken: "token-2")) {
            $0.trelloToken = "token-2"
            $0.needsAttention = nil
        },
        AccountCase(testDescription: "a new API key clears the flag", update: AccountUpdate(trelloAPIKey: "key-2")) {
            $0.trelloAPIKey = "key-2"
            $0.needsAttention = nil
        },
        AccountCase(testDescription: "a new webhook secret keeps the flag", update: AccountUpdate(trelloWebhookSecret: "secret-2")) {
            $0.trelloWebhookSecret = "secret-2"
        },
        AccountCase(
            testDescription: "policy and delete mode keep the credentials and the flag",
            update: AccountUpdate(conflictPolicy: .preferTrello, deleteMode: .delete)
        ) {
            $0.conflictPolicy = .preferTrello
            $0.deleteMode = .delete
        },
        AccountCase(
            testDescription: "everything at once",
            update: AccountUpdate(
                trelloAPIKey: "key-3", trelloToken: "token-3", trelloWebhookSecret: "secret-3", conflictPolicy: .lww, deleteMode: .delete)
        ) {
            $0 = AccountDetails(
                id: "acct", trelloAPIKey: "key-3", trelloToken: "token-3", trelloWebhookSecret: "secret-3", conflictPolicy: .lww, deleteMode: .delete,
                createdAt: $0.createdAt, updatedAt: $0.updatedAt, needsAttention: nil)
        },
    ]

    @Test(arguments: accountCases) func anAccountUpdate(_ c: AccountCase) {
        let now = "2026-11-26T12:00:00.000Z"
        var expected = Self.base
        expected.updatedAt = now
        c.expect(&expected)
        #expect(Self.base.applying(c.update, at: now) == expected)
        #expect(Self.base.applying(c.update, at: now).createdAt == Self.base.createdAt)
    }

    @Test func anAccountTheStoreDoesNotHaveWaitsForItsUserAndArchives() {
        #expect(AccountDetails.missingAccountPolicy == (ConflictPolicy.manual, DeleteMode.archive))
    }

    // MARK: Resolution claims

    /// (open?, claimed how many seconds before now — nil: never, claimed?)
    static let claimCases: [(open: Bool, heldFor: Double?, claimed: Bool)] = [
        (true, nil, true),
        (true, 1, false),
        (true, 59, false),
        (true, 60, false),  // a claim exactly a minute old still holds
        (true, 61, true),
        (true, 3600, true),
        (false, nil, false),
        (false, 3600, false),
    ]

    @Test(arguments: claimCases) func aResolutionClaim(_ c: (open: Bool, heldFor: Double?, claimed: Bool)) {
        let claim = ResolutionClaim(now: Self.t0)
        let held = c.heldFor.map { Timestamp.string(Self.t0.addingTimeInterval(-$0)) }
        let stamp = claim.claim(open: c.open, heldSince: held)
        #expect((stamp != nil) == c.claimed)
        if let stamp { #expect(stamp == Timestamp.string(Self.t0)) }
    }

    @Test func aStoredStatusIsOpenOnlyWhenItSaysSo() throws {
        #expect(try ResolutionTable.conflicts.isOpen("open"))
        #expect(try !ResolutionTable.conflicts.isOpen("resolved"))
        #expect(try ResolutionTable.duplicates.isOpen("open"))
        #expect(try !ResolutionTable.duplicates.isOpen("merged"))
        #expect(try !ResolutionTable.duplicates.isOpen("kept_both"))
        #expect(throws: UnknownStoredValue.self) { try ResolutionTable.conflicts.isOpen("merged") }
    }

    // MARK: Possible duplicates

    static let duplicateCases: [(stored: [DuplicateStatus], rewritten: Int64?)] = [
        ([], nil),
        ([.open], 1),
        ([.merged], nil),
        ([.keptBoth, .merged], nil),
        ([.merged, .open], 2),
        ([.keptBoth, .open, .merged], 2),
    ]

    @Test(arguments: duplicateCases) func aReminderHasOneOpenDuplicate(_ c: (stored: [DuplicateStatus], rewritten: Int64?)) {
        let stored = c.stored.enumerated().map { (id: Int64($0.offset + 1), status: $0.element) }
        #expect(PotentialDuplicates.rewritten(among: stored) == c.rewritten)
    }

    // MARK: Card observations (ChangeApplier)

    /// A card's webhook history, and the changes the apps are left with.
    struct ApplyCase: Sendable, CustomTestStringConvertible {
        var testDescription: String
        var settings = SyncSettings.default
        /// Seconds after t0, and what the action did.
        var steps: [(at: Double, kind: CardObservation.Kind)]
        /// The live changes, oldest first: type and changed fields.
        var changes: [(ChangeType, [String])]
    }

    static let title = SyncField.title.rawValue
    static let notes = SyncField.notes.rawValue
    static let completed = SyncField.completed.rawValue

    static let applyCases: [ApplyCase] = [
        ApplyCase(
            testDescription: "a new card is one create",
            steps: [(0, .fields([title: "Milk", notes: "2l"], full: true))], changes: [(.create, [notes, title])]),
        ApplyCase(
            testDescription: "the same values again change nothing",
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .fields([title: "Milk"], full: false))], changes: [(.create, [title])]),
        ApplyCase(
            testDescription: "an edit before the apps acked folds into the create",
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .fields([notes: "2l"], full: false))], changes: [(.create, [notes, title])]),
        ApplyCase(
            testDescription: "an older edit delivered late is ignored",
            steps: [(10, .fields([title: "Milk"], full: true)), (5, .fields([title: "Bread"], full: false))], changes: [(.create, [title])]),
        ApplyCase(
            testDescription: "a removal after the create is sent as a delete",
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .removed)], changes: [(.delete, [])]),
        ApplyCase(
            testDescription: "a removal older than the card's last edit is ignored",
            steps: [(0, .fields([title: "Milk"], full: true)), (10, .fields([title: "Bread"], full: false)), (5, .removed)],
            changes: [(.create, [title])]),
        ApplyCase(
            testDescription: "a list that syncs only to Trello sends the apps nothing of Trello's cards",
            settings: SyncSettings(direction: .remindersToTrello),
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .removed)], changes: []),
        ApplyCase(
            testDescription: "an echo of our own write changes nothing",
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .echo([title: "Bread"]))], changes: [(.create, [title])]),
        ApplyCase(
            testDescription: "a card back after its removal is created again",
            steps: [(0, .fields([title: "Milk"], full: true)), (5, .removed), (10, .fields([title: "Milk"], full: true))],
            changes: [(.create, [title])]),
    ]

    @Test(arguments: applyCases) func cardObservations(_ c: ApplyCase) throws {
        var rows = MemoryRows()
        rows.lists[Self.list] = (c.settings, Self.t0)
        for step in c.steps {
            var applier = ChangeApplier(rows: rows)
            try applier.apply(
                CardObservation(
                    accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0.addingTimeInterval(step.at),
                    kind: step.kind))
            rows = applier.rows
        }
        #expect(rows.live.map(\.type) == c.changes.map(\.0))
        #expect(rows.live.map(\.changedFields) == c.changes.map(\.1))
    }

    @Test func aCompletionAloneIsSentAsAComplete() throws {
        var rows = MemoryRows()
        rows.lists[Self.list] = (.default, Self.t0)
        var applier = ChangeApplier(rows: rows)
        func observe(_ at: Double, _ kind: CardObservation.Kind) throws {
            try applier.apply(
                CardObservation(
                    accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0.addingTimeInterval(at),
                    kind: kind))
        }
        try observe(0, .fields([Self.title: "Milk", Self.completed: false], full: true))
        _ = try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1, reminderID: "rem-1")], rows: &applier.rows)
        try observe(5, .fields([Self.completed: true], full: false))
        #expect(applier.rows.live.map(\.type) == [.complete])
        #expect(applier.rows.live.first?.reminderID == "rem-1")
    }

    // MARK: Acknowledgement

    @Test func acksAreAllOrNothingAndMapTheReminder() throws {
        var rows = MemoryRows()
        rows.lists[Self.list] = (.default, Self.t0)
        var applier = ChangeApplier(rows: rows)
        for (card, account) in [("a", Self.account), ("b", Self.account), ("c", "other")] {
            try applier.apply(
                CardObservation(
                    accountID: account, syncListID: Self.list, cardID: card, actionID: nil, actionDate: Self.t0,
                    kind: .fields([Self.title: .string(card)], full: true)))
        }
        rows = applier.rows
        // Another account's change, or an id never issued: nothing is acked.
        #expect(try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1), ChangeAck(id: 3)], rows: &rows) == .notFound(3))
        #expect(try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1), ChangeAck(id: 99)], rows: &rows) == .notFound(99))
        #expect(rows.live.count == 3)
        #expect(
            try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1, reminderID: "r-a"), ChangeAck(id: 2)], rows: &rows)
                == .acked([1, 2]))
        #expect(rows.live.map(\.cardID) == ["c"])
        #expect(rows.tasks[AccountScoped(Self.account, "a")]?.reminderID == "r-a")
        #expect(rows.tasks[AccountScoped(Self.account, "b")]?.reminderID == nil)
        // Acked before: acked again, harmlessly.
        #expect(try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1)], rows: &rows) == .acked([1]))
    }

    /// The person added the same thing on both sides: the reminder was sent first and held as a possible duplicate of
    /// the card; the app then took that reminder for the card's create. The two are one: nothing is left to choose.
    /// Another card's duplicate, another account's, and one a resolution is under way for stay as they are.
    @Test func anAckThatMapsTheReminderToTheCardSettlesTheirPossibleDuplicate() throws {
        var rows = MemoryRows()
        rows.lists[Self.list] = (.default, Self.t0)
        var applier = ChangeApplier(rows: rows)
        for card in ["a", "b"] {
            try applier.apply(
                CardObservation(
                    accountID: Self.account, syncListID: Self.list, cardID: card, actionID: nil, actionDate: Self.t0,
                    kind: .fields([Self.title: .string(card)], full: true)))
        }
        rows = applier.rows
        rows.duplicates = [
            .init(accountID: Self.account, reminderID: "rem", cardID: "a", status: .open),
            .init(accountID: Self.account, reminderID: "rem", cardID: "z", status: .open),
            .init(accountID: "other", reminderID: "rem", cardID: "a", status: .open),
            .init(accountID: Self.account, reminderID: "rem-b", cardID: "b", status: .open, resolving: true),
        ]
        #expect(
            try Acknowledgement.run(
                accountID: Self.account, acks: [ChangeAck(id: 1, reminderID: "rem"), ChangeAck(id: 2, reminderID: "rem-b")], rows: &rows)
                == .acked([1, 2]))
        #expect(rows.duplicates.map(\.status) == [.merged, .open, .open, .open])
    }

    @Test func aCreateAckedAfterItWasFoldedTurnsTheNewerCreateIntoAnUpdate() throws {
        var rows = MemoryRows()
        rows.lists[Self.list] = (.default, Self.t0)
        var applier = ChangeApplier(rows: rows)
        for (at, fields) in [(0.0, [Self.title: JSONValue.string("Milk")]), (5, [Self.notes: "2l"])] {
            try applier.apply(
                CardObservation(
                    accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0.addingTimeInterval(at),
                    kind: .fields(fields, full: at == 0)))
        }
        rows = applier.rows
        #expect(rows.live.map(\.type) == [.create])
        #expect(rows.live.first?.id == 2)
        // The app made the reminder from change 1 before it saw change 2.
        #expect(try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1, reminderID: "rem")], rows: &rows) == .acked([1]))
        #expect(rows.live.map(\.type) == [.update])
        #expect(rows.changes.map(\.id) == [2])
    }

    // MARK: The job lease

    /// A job lease's table: what is stored before (a running job of the account, its lease), what happens, the answer.
    struct LeaseCase: Sendable, CustomTestStringConvertible {
        enum Before: Sendable { case nothing, running(beatSecondsAgo: Double, holder: String), ended }
        enum Action: Sendable { case submit(JobKind), start(holder: String), beat(holder: String) }
        enum Answer: Sendable, Equatable { case created, busy, replayed, run, skip(JobSkip), beat(Bool) }
        var testDescription: String
        var before: Before
        var action: Action
        var answer: Answer
        /// Whether the earlier job ends given up as stale.
        var earlierStale = false
    }

    static let staleAfter: TimeInterval = 60

    static let leaseCases: [LeaseCase] = [
        LeaseCase(testDescription: "a sync with no lease held is created", before: .nothing, action: .submit(.sync), answer: .created),
        LeaseCase(
            testDescription: "a sync while another beats is refused", before: .running(beatSecondsAgo: 10, holder: "w1"), action: .submit(.sync),
            answer: .busy),
        LeaseCase(
            testDescription: "a sync after the other went stale is created and the other given up",
            before: .running(beatSecondsAgo: 61, holder: "w1"), action: .submit(.sync), answer: .created, earlierStale: true),
        LeaseCase(
            testDescription: "a reconciliation takes no lease", before: .running(beatSecondsAgo: 10, holder: "w1"), action: .submit(.reconcile),
            answer: .created),
        LeaseCase(
            testDescription: "a worker starts a job nobody runs", before: .running(beatSecondsAgo: 10, holder: JobLeaseRow.unclaimed),
            action: .start(holder: "w2"), answer: .run),
        LeaseCase(
            testDescription: "a job another worker beats for is left to it", before: .running(beatSecondsAgo: 5, holder: "w1"),
            action: .start(holder: "w2"), answer: .skip(.runningOn(holder: "w1"))),
        LeaseCase(
            testDescription: "a job whose worker went quiet (a quarter of the staleness) is taken over",
            before: .running(beatSecondsAgo: 20, holder: "w1"), action: .start(holder: "w2"), answer: .run),
        LeaseCase(
            testDescription: "a stale job is never resumed", before: .running(beatSecondsAgo: 61, holder: "w1"), action: .start(holder: "w2"),
            answer: .skip(.stale), earlierStale: true),
        LeaseCase(testDescription: "an ended job is not run again", before: .ended, action: .start(holder: "w1"), answer: .skip(.ended(.completed))),
        LeaseCase(
            testDescription: "the holder's beat moves the heartbeat", before: .running(beatSecondsAgo: 10, holder: "w1"), action: .beat(holder: "w1"),
            answer: .beat(true)),
        LeaseCase(
            testDescription: "a beat of a worker that lost the job tells it to stop", before: .running(beatSecondsAgo: 10, holder: "w1"),
            action: .beat(holder: "w2"), answer: .beat(false)),
        LeaseCase(
            testDescription: "a beat after the job went stale gives it up", before: .running(beatSecondsAgo: 61, holder: "w1"),
            action: .beat(holder: "w1"), answer: .beat(false), earlierStale: true),
    ]

    @Test(arguments: leaseCases) func theJobLease(_ c: LeaseCase) throws {
        let now = Self.t0
        var rows = MemoryRows()
        let earlier = "earlier-job"
        switch c.before {
        case .nothing: break
        case .running(let ago, let holder):
            let beat = Timestamp.string(now.addingTimeInterval(-ago))
            try rows.insertJob(
                SyncJob(
                    id: earlier, accountID: Self.account, kind: .sync, status: .running, processed: 0, total: 1, payload: .array([]), results: [],
                    createdAt: beat, updatedAt: beat), idempotencyKey: nil)
            try rows.putLease(JobLeaseRow(accountID: Self.account, jobID: earlier, holder: holder, expiresAt: beat, updatedAt: beat))
        case .ended:
            try rows.insertJob(
                SyncJob(
                    id: earlier, accountID: Self.account, kind: .sync, status: .completed, processed: 1, total: 1, payload: .array([]), results: [],
                    createdAt: "", updatedAt: ""), idempotencyKey: nil)
        }
        let lease = JobLease(staleAfter: Self.staleAfter, now: now)
        let answer: LeaseCase.Answer
        switch c.action {
        case .submit(let kind):
            switch try lease.submit(
                accountID: Self.account, kind: kind, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, rows: &rows)
            {
            case .created(let job):
                answer = .created
                // A sync or import holds the lease now; a reconciliation leaves it as it was.
                #expect((rows.leases[Self.account]?.jobID == job.id) == (kind != .reconcile))
            case .busy(let running):
                answer = .busy
                #expect(running == earlier)
            case .replayed: answer = .replayed
            }
        case .start(let holder):
            switch try lease.start(jobID: earlier, holder: holder, rows: &rows) {
            case .run(let job):
                answer = .run
                #expect(job.updatedAt == Timestamp.string(now))
                #expect(rows.leases[Self.account]?.holder == holder)
            case .skip(let why): answer = .skip(why)
            }
        case .beat(let holder):
            answer = .beat(try lease.beat(jobID: earlier, holder: holder, rows: &rows))
        }
        #expect(answer == c.answer)
        if case .running = c.before {
            let job = try #require(rows.jobs[earlier])
            #expect((job.status == .error && job.error == JobOutcome.stale.rawValue) == c.earlierStale)
            // A job given up leaves the lease: to the new job of a submission, to nobody otherwise.
            if c.earlierStale, case .submit = c.action {
                #expect(rows.leases[Self.account]?.jobID != earlier)
            } else if c.earlierStale {
                #expect(rows.leases[Self.account] == nil)
            }
        }
    }

    @Test func aSubmissionWithAKeyUsedBeforeIsTheSameJob() throws {
        var rows = MemoryRows()
        let lease = JobLease(staleAfter: Self.staleAfter, now: Self.t0)
        guard
            case .created(let first) = try lease.submit(
                accountID: Self.account, kind: .sync, deviceID: nil, idempotencyKey: "k", payload: .array([]), total: 0, rows: &rows)
        else {
            Issue.record("not created")
            return
        }
        let again = try lease.submit(
            accountID: Self.account, kind: .sync, deviceID: nil, idempotencyKey: "k", payload: .array([]), total: 0, rows: &rows)
        #expect(again == .replayed(first))
        #expect(rows.jobs.count == 1)
    }

    @Test func aJobEndedAlreadyKeepsItsEnd() throws {
        var rows = MemoryRows()
        let lease = JobLease(staleAfter: Self.staleAfter, now: Self.t0)
        guard
            case .created(let job) = try lease.submit(
                accountID: Self.account, kind: .sync, deviceID: nil, idempotencyKey: nil, payload: .array([]), total: 0, rows: &rows)
        else {
            Issue.record("not created")
            return
        }
        // Given up as stale by another worker first; this worker's finish changes nothing but the lease.
        try rows.endJob(id: job.id, status: .error, error: JobOutcome.stale.rawValue, at: nil)
        try lease.finish(jobID: job.id, status: .completed, error: nil, rows: &rows)
        #expect(rows.jobs[job.id]?.status == .error)
        #expect(rows.jobs[job.id]?.error == JobOutcome.stale.rawValue)
        #expect(rows.leases[Self.account] == nil)
    }

    // MARK: Flagging an account

    static let flagCases: [(stored: String?, whileToken: String?, applies: Bool)] = [
        ("token-1", nil, true),
        ("token-1", "token-1", true),
        ("token-2", "token-1", false),
        (nil, "token-1", false),
        (nil, nil, true),
    ]

    @Test(arguments: flagCases) func aFlagForAFailedTokenAppliesWhileTheAccountHasIt(_ c: (stored: String?, whileToken: String?, applies: Bool)) {
        #expect(AttentionFlag.applies(storedToken: c.stored, whileToken: c.whileToken) == c.applies)
    }

    // MARK: Outbound writes (ChangeApplier.record) and imports

    /// A card the apps already have (created, acked, mapped to `rem`), with `fields` stamped at t0.
    static func mappedCard(_ fields: [String: JSONValue]) throws -> MemoryRows {
        var rows = MemoryRows()
        rows.lists[Self.list] = (.default, Self.t0)
        var applier = ChangeApplier(rows: rows)
        try applier.apply(
            CardObservation(
                accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0, kind: .fields(fields, full: true))
        )
        rows = applier.rows
        _ = try Acknowledgement.run(accountID: Self.account, acks: [ChangeAck(id: 1, reminderID: "rem")], rows: &rows)
        return rows
    }

    @Test func aConflictIsOneOpenRowPerCardAndFieldHoldingTheLatestValues() throws {
        var applier = ChangeApplier(rows: try Self.mappedCard([Self.title: "Milk"]))
        for (trello, reminders) in [("Bread", "Eggs"), ("Butter", "Jam")] {
            var write = SyncWrite(accountID: Self.account, syncListID: Self.list, cardID: "card", reminderID: "rem")
            write.conflicts = [NewConflict(field: Self.title, trelloValue: .string(trello), remindersValue: .string(reminders))]
            let ids = try applier.record(write, now: Self.t0.addingTimeInterval(10))
            #expect(ids == [1])
        }
        #expect(applier.rows.conflicts.count == 1)
        #expect(applier.rows.conflicts.first?.stored.trelloValueJSON == JSONValue.string("Butter").canonicalJSON)
        #expect(applier.rows.conflicts.first?.stored.remindersValueJSON == JSONValue.string("Jam").canonicalJSON)
    }

    @Test func anAppsWinningValueRewritesTheTrelloChangeTheAppsHaveNotPulled() throws {
        var applier = ChangeApplier(rows: try Self.mappedCard([Self.title: "Milk", Self.notes: "2l"]))
        // Trello edits the title; the apps have not acked it when their own edit wins.
        try applier.apply(
            CardObservation(
                accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0.addingTimeInterval(5),
                kind: .fields([Self.title: "Bread"], full: false)))
        var write = SyncWrite(accountID: Self.account, syncListID: Self.list, cardID: "card", reminderID: "rem")
        write.winning = [Self.title: "Eggs", Self.notes: "2l"]
        _ = try applier.record(write, now: Self.t0.addingTimeInterval(10))
        // The unacked update now says the apps' title; the notes they did not change stay out of it.
        #expect(applier.rows.live.map(\.type) == [.update])
        #expect(applier.rows.live.last?.fields == [Self.title: "Eggs"])
        #expect(applier.rows.live.last?.changedFields == [Self.title])
    }

    @Test func aReminderDeletedOnTheDeviceDropsTheCardsUnpulledChanges() throws {
        var applier = ChangeApplier(rows: try Self.mappedCard([Self.title: "Milk"]))
        try applier.apply(
            CardObservation(
                accountID: Self.account, syncListID: Self.list, cardID: "card", actionID: nil, actionDate: Self.t0.addingTimeInterval(5),
                kind: .fields([Self.title: "Bread"], full: false)))
        var write = SyncWrite(accountID: Self.account, syncListID: Self.list, cardID: "card", reminderID: "rem")
        write.deleted = true
        write.dropPending = true
        _ = try applier.record(write, now: Self.t0.addingTimeInterval(10))
        #expect(applier.rows.changes.isEmpty)
        let task = try #require(applier.rows.tasks[AccountScoped(Self.account, "card")])
        #expect(task.deleted)
        #expect(task.stamps[FieldStamps.membership]?.hash == "removed")
    }

    @Test func anImportSendsOnlyCardsTheAppsDoNotHave() throws {
        var applier = ChangeApplier(rows: try Self.mappedCard([Self.title: "Milk"]))
        try applier.importCards(
            accountID: Self.account, syncListID: Self.list, cards: [("card", [Self.title: "Milk"]), ("new", [Self.title: "Bread"])],
            now: Self.t0.addingTimeInterval(10))
        #expect(applier.written == 1)
        #expect(applier.rows.live.map(\.cardID) == ["new"])
        #expect(applier.rows.live.map(\.type) == [.create])
    }

    // MARK: Which card a reminder maps to

    /// A reminder's card rows, newest first: (card id, deleted) — and the card it maps to.
    static let mappingCases: [(rows: [(String, Bool)], mapped: String?)] = [
        ([], nil),
        ([("c1", false)], "c1"),
        ([("pending:r", false), ("c1", false)], "c1"),  // the live card over a newer placeholder
        ([("c1", true), ("pending:r", false)], "pending:r"),  // a create in flight over the card it left
        ([("c2", true), ("c1", true)], "c2"),  // gone both: the newer
        ([("c2", false), ("c1", false)], "c2"),
    ]

    @Test(arguments: mappingCases) func theCardAReminderMapsTo(_ c: (rows: [(String, Bool)], mapped: String?)) {
        let rows = c.rows.map { SyncTaskRecord(syncListID: Self.list, cardID: $0.0, reminderID: "r", deleted: $0.1, stamps: [:]) }
        #expect(SyncTaskRecord.mapping(among: rows)?.cardID == c.mapped)
    }

    /// A damaged row reads the same on every try: the entry that met it is isolated (`.data`), not retried as an outage —
    /// also when PostgreSQL's transaction wrapped the error.
    @Test func aDamagedRowIsTheDatasFaultOnEitherBackend() {
        let damaged = UnknownStoredValue.unexpected("ChangeType", "rename")
        #expect(StoreFailure(damaged) == .data)
        #expect(StoreFailure(PostgresStoreError(damaged)) == .data)
        #expect(StoreFailure(PostgresStoreError(CancellationError())) == .unavailable)
        #expect(StoreFailure(PostgresStoreError(timeoutAfter: .seconds(5))) == .unavailable)
    }
}
