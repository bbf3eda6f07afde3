import Foundation
import RoundupCore

@testable import RoundupStore

/// The store's rows held in memory, for running the rules (`ChangeApplier`, the outbound rules, `Acknowledgement`,
/// `JobLease`) without a database. Each call does what the SQLite backend's statement does (SQLiteChangeRows,
/// SQLiteJobLeaseRows), on plain arrays and dictionaries; the same rules run on both real backends in the rest of the
/// suite.
struct MemoryRows {
    struct CardTask: Equatable {
        var syncListID: String
        var stamps: [String: FieldStamps.Stamp]
        var deleted: Bool
        var reminderID: String?
        var actionID: String?
        var syncedAt: String?
        /// `sync_tasks.field_values` (`FieldValues`): nil until a write gives some.
        var values: [String: JSONValue]? = nil

        mutating func set(_ written: [String: JSONValue]) {
            guard !written.isEmpty else { return }
            values = (values ?? [:]).merging(written) { _, new in new }
        }
    }

    struct Change: Equatable {
        var id: Int64
        var accountID: String
        var syncListID: String
        var cardID: String
        var type: ChangeType
        var changedFields: [String]
        var fields: [String: JSONValue]
        var superseded = false
        var reminderID: String?
    }

    struct Conflict: Equatable {
        var id: Int64
        var stored: StoredConflict
    }

    /// A row of `potential_duplicates`, as much of it as the rules read.
    struct Duplicate: Equatable {
        var accountID: String
        var reminderID: String
        var cardID: String
        var status: DuplicateStatus
        var resolving = false
    }

    /// Keyed by account and card.
    var tasks: [AccountScoped: CardTask] = [:]
    var changes: [Change] = []
    var conflicts: [Conflict] = []
    var duplicates: [Duplicate] = []
    /// Each list's settings and pairing time.
    var lists: [String: (settings: SyncSettings, pairedAt: Date?)] = [:]
    var activity: [NewActivity] = []
    var jobs: [String: SyncJob] = [:]
    var idempotencyKeys: [AccountScoped: String] = [:]
    var leases: [String: JobLeaseRow] = [:]
    /// `pending_changes`' sequence: the highest id ever issued.
    private(set) var lastChangeID: Int64 = 0
    private var lastConflictID: Int64 = 0

    /// The live changes (not folded into a newer one), oldest first.
    var live: [Change] { changes.filter { !$0.superseded } }
}

extension MemoryRows: ChangeRows {
    func task(accountID: String, cardID: String) throws -> ChangeApplier<Self>.TaskRow? {
        tasks[AccountScoped(accountID, cardID)].map {
            .init(syncListID: $0.syncListID, stamps: $0.stamps, deleted: $0.deleted, reminderID: $0.reminderID, hasValues: $0.values != nil)
        }
    }

    mutating func updateTask(
        accountID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], deleted: Bool?, actionID: String?,
        now: String
    ) throws {
        let key = AccountScoped(accountID, cardID)
        guard var task = tasks[key] else { return }
        task.stamps = stamps
        task.set(values)
        if let deleted { task.deleted = deleted }
        task.actionID = actionID
        tasks[key] = task
    }

    mutating func upsertTask(
        accountID: String, syncListID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], actionID: String?,
        now: String
    ) throws {
        let key = AccountScoped(accountID, cardID)
        var task = tasks[key] ?? CardTask(syncListID: syncListID, stamps: [:], deleted: false)
        task.syncListID = syncListID
        task.stamps = stamps
        task.set(values)
        task.deleted = false
        task.actionID = actionID
        tasks[key] = task
    }

    func latestChange(accountID: String, cardID: String) throws -> ChangeApplier<Self>.ChangeRow? {
        changes.last { $0.accountID == accountID && $0.cardID == cardID && !$0.superseded }.map {
            .init(id: $0.id, type: $0.type, changedFields: $0.changedFields, fields: $0.fields)
        }
    }

    mutating func supersede(changeID: Int64, accountID: String, cardID: String) throws {
        for index in changes.indices where changes[index].id == changeID { changes[index].superseded = true }
    }

    mutating func insertChange(_ c: ChangeApplier<Self>.NewChange, now: String) throws {
        lastChangeID += 1
        changes.append(
            Change(
                id: lastChangeID, accountID: c.accountID, syncListID: c.syncListID, cardID: c.cardID, type: c.type, changedFields: c.changedFields,
                fields: c.fields, reminderID: tasks[AccountScoped(c.accountID, c.cardID)]?.reminderID))
    }

    func listRules(syncListID: String) throws -> ChangeApplier<Self>.ListRules? {
        lists[syncListID].map { .init(settings: $0.settings, pairedAt: $0.pairedAt) }
    }

    mutating func insertActivity(accountID: String, _ activity: NewActivity, now: String) throws {
        self.activity.append(activity)
    }
}

extension MemoryRows: OutboundRows {
    mutating func putTask(_ t: OutboundTask) throws {
        let key = AccountScoped(t.accountID, t.cardID)
        let old = tasks[key]
        tasks[key] = CardTask(
            syncListID: t.syncListID, stamps: t.stamps, deleted: t.deleted, reminderID: t.reminderID ?? old?.reminderID, actionID: old?.actionID,
            syncedAt: t.syncedAt ?? old?.syncedAt, values: old?.values)
        tasks[key]?.set(t.values)
    }

    mutating func deleteTask(accountID: String, cardID: String) throws { tasks[AccountScoped(accountID, cardID)] = nil }

    mutating func dropChanges(accountID: String, cardID: String) throws {
        changes.removeAll { $0.accountID == accountID && $0.cardID == cardID }
    }

    func openConflictID(accountID: String, cardID: String, field: String) throws -> Int64? {
        conflicts.first { $0.stored.accountID == accountID && $0.stored.cardID == cardID && $0.stored.field == field }?.id
    }

    mutating func updateConflict(id: Int64, _ c: StoredConflict) throws {
        for index in conflicts.indices where conflicts[index].id == id {
            let reminder = c.reminderID ?? conflicts[index].stored.reminderID
            conflicts[index].stored = c
            conflicts[index].stored.reminderID = reminder
        }
    }

    mutating func insertConflict(_ c: StoredConflict) throws -> Int64? {
        lastConflictID += 1
        let id = lastConflictID
        conflicts.append(Conflict(id: id, stored: c))
        return id
    }
}

extension MemoryRows: AckRows {
    func highestIssuedChangeID() throws -> Int64 { lastChangeID }

    func change(id: Int64) throws -> AckedChange? {
        changes.first { $0.id == id }.map { AckedChange(accountID: $0.accountID, cardID: $0.cardID, type: $0.type, superseded: $0.superseded) }
    }

    mutating func mapReminder(accountID: String, cardID: String, reminderID: String, now: String) throws {
        tasks[AccountScoped(accountID, cardID)]?.reminderID = reminderID
    }

    mutating func turnCreatesIntoUpdates(accountID: String, cardID: String, after id: Int64) throws {
        for index in changes.indices
        where changes[index].accountID == accountID && changes[index].cardID == cardID && changes[index].id > id && !changes[index].superseded
            && changes[index].type == .create
        {
            changes[index].type = .update
        }
    }

    mutating func deleteChange(accountID: String, id: Int64, cardID: String) throws {
        // The change, and the older changes of its card folded into it.
        changes.removeAll { $0.accountID == accountID && $0.cardID == cardID && ($0.id == id || ($0.id < id && $0.superseded)) }
    }

    mutating func settleDuplicates(accountID: String, cardID: String, reminderID: String, now: String) throws {
        for index in duplicates.indices
        where duplicates[index].accountID == accountID && duplicates[index].reminderID == reminderID && duplicates[index].cardID == cardID
            && duplicates[index].status == .open && !duplicates[index].resolving
        {
            duplicates[index].status = .merged
        }
    }
}

extension MemoryRows: JobLeaseRows {
    func job(id: String) throws -> SyncJob? { jobs[id] }

    func job(accountID: String, idempotencyKey: String) throws -> SyncJob? {
        idempotencyKeys[AccountScoped(accountID, idempotencyKey)].flatMap { jobs[$0] }
    }

    func lease(accountID: String) throws -> JobLeaseRow? { leases[accountID] }

    mutating func insertJob(_ job: SyncJob, idempotencyKey: String?) throws {
        jobs[job.id] = job
        if let idempotencyKey { idempotencyKeys[AccountScoped(job.accountID, idempotencyKey)] = job.id }
    }

    mutating func endJob(id: String, status: JobStatus, error: String?, at now: String?) throws {
        guard var job = jobs[id] else { return }
        job.status = status
        job.error = error
        if let now { job.updatedAt = now }
        jobs[id] = job
    }

    mutating func touchJob(id: String, at now: String, progress: JobProgress?) throws {
        guard var job = jobs[id] else { return }
        job.updatedAt = now
        if let progress {
            job.processed = progress.processed
            if let total = progress.total { job.total = total }
        }
        jobs[id] = job
    }

    mutating func putLease(_ lease: JobLeaseRow) throws { leases[lease.accountID] = lease }

    mutating func removeLease(accountID: String) throws { leases[accountID] = nil }
}
