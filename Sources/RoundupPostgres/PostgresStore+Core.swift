import Foundation
import Logging
import PostgresNIO
public import RoundupCore
public import RoundupStore

/// Accounts, lists, the worker's batch and the apps' changes, on PostgreSQL.
extension PostgresStore: SyncStore {
    public func createAccount(authTokenHash: String) async throws -> String {
        let id = Hex.lowercase(UUID())
        let now = Timestamp.now()
        try await write { [self] c in
            try await c.run(
                "INSERT INTO accounts (id, auth_token_hash, webhook_token, created_at, updated_at) VALUES (\(id), \(authTokenHash), \(WebhookCallback.makeToken()), \(now), \(now))",
                logger)
        }
        return id
    }

    public func account(id: String) async throws -> AccountRecord? {
        try await read { [self] c in
            try await c.rows("SELECT \(unescaped: AccountRecord.columns) FROM accounts WHERE id = \(id)", logger).first.map(
                AccountRecord.init(stored:))
        }
    }

    public func insertSyncList(_ list: SyncListRecord) async throws {
        let text = list.settings.storedText
        do {
            try await write { [self] c in
                try await c.run(
                    """
                    INSERT INTO sync_lists (id, account_id, name, trello_board_id, trello_list_id, created_at, updated_at, settings, trello_list_name)
                    VALUES (\(list.id), \(list.accountID), \(list.name), \(list.trelloBoardID), \(list.trelloListID), \(list.createdAt),
                        \(list.createdAt), \(text), \(list.trelloListName))
                    """, logger)
            }
        } catch  where Self.sqlState(error) == "23505" {
            throw StoreError.duplicateList
        }
    }

    // MARK: The worker's batch

    /// The same answer as SQLite's lookup, in five queries whatever the batch's size.
    public func lookup(_ items: [BatchLookup]) async throws -> BatchContext {
        var listAccounts: [String] = [], listIDs: [String] = []
        var boardAccounts: [String] = [], boardIDs: [String] = []
        var taskAccounts: [String] = [], cardIDs: [String] = []
        for item in items {
            for list in item.listIDs {
                listAccounts.append(item.accountID)
                listIDs.append(list)
            }
            if let board = item.boardID {
                boardAccounts.append(item.accountID)
                boardIDs.append(board)
            }
            taskAccounts.append(item.accountID)
            cardIDs.append(item.cardID)
        }
        let accounts = Array(Set(items.map(\.accountID)))
        return try await read { [logger, listAccounts, listIDs, boardAccounts, boardIDs, taskAccounts, cardIDs] c in
            var context = BatchContext()
            // Whether each task's list filters its cards, its settings parsed once per batch.
            var listFiltered: [String: Bool] = [:]
            for row in try await c.rows(
                """
                SELECT l.account_id, l.trello_list_id, l.id, l.name, l.trello_board_id, l.created_at, l.settings FROM sync_lists l
                JOIN unnest(\(listAccounts)::text[], \(listIDs)::text[]) AS k(a, t) ON l.account_id = k.a AND l.trello_list_id = k.t
                """, logger)
            {
                let account = try row.text(0), list = try row.text(1)
                context.lists[AccountScoped(account, list)] = SyncListRecord(
                    id: try row.text(2), accountID: account, name: try row.text(3), trelloBoardID: try row.text(4), trelloListID: list,
                    createdAt: try row.optionalText(5), settings: SyncSettings(stored: try row.optionalText(6)))
            }
            for row in try await c.rows(
                """
                SELECT DISTINCT l.account_id, l.trello_board_id FROM sync_lists l
                JOIN unnest(\(boardAccounts)::text[], \(boardIDs)::text[]) AS k(a, b) ON l.account_id = k.a AND l.trello_board_id = k.b
                """, logger)
            {
                context.boards.insert(AccountScoped(try row.text(0), try row.text(1)))
            }
            if !context.boards.isEmpty {
                for row in try await c.rows(
                    """
                    SELECT f.account_id, f.trello_board_id, f.trello_field_id, f.options FROM sync_custom_fields f
                    JOIN unnest(\(boardAccounts)::text[], \(boardIDs)::text[]) AS k(a, b) ON f.account_id = k.a AND f.trello_board_id = k.b
                    WHERE lower(f.name) = 'priority'
                    """, logger)
                {
                    let board = AccountScoped(try row.text(0), try row.text(1))
                    guard context.boards.contains(board) else { continue }  // only boards the account syncs, as on SQLite
                    context.priorityFields[board] = Self.priorityField(fieldID: try row.text(2), options: try row.text(3))
                }
            }
            for row in try await c.rows(
                """
                SELECT t.account_id, t.trello_card_id, t.sync_list_id, t.deleted, l.settings FROM sync_tasks t
                JOIN unnest(\(taskAccounts)::text[], \(cardIDs)::text[]) AS k(a, c) ON t.account_id = k.a AND t.trello_card_id = k.c
                LEFT JOIN sync_lists l ON l.id = t.sync_list_id
                """, logger)
            {
                let syncListID = try row.text(2)
                let filtered = try listFiltered[syncListID] ?? !SyncSettings(stored: try row.optionalText(4)).filter.isEmpty
                listFiltered[syncListID] = filtered
                context.tasks[AccountScoped(try row.text(0), try row.text(1))] = TaskState(
                    syncListID: syncListID, deleted: try row.bool(3), listFiltered: filtered)
            }
            for row in try await c.rows(
                "SELECT id, trello_api_key, trello_token FROM accounts WHERE id = ANY(\(accounts)::text[]) AND trello_api_key IS NOT NULL AND trello_token IS NOT NULL",
                logger)
            {
                context.credentials[try row.text(0)] = TrelloCredentials(apiKey: try row.text(1), token: try row.text(2))
            }
            return context
        }
    }

    static func priorityField(fieldID: String, options: String) -> PriorityField {
        PriorityField(fieldID: fieldID, storedOptions: options)
    }

    static func priorityField(_ c: PostgresConnection, accountID: String, boardID: String, logger: Logger) async throws -> PriorityField? {
        try await c.rows(
            """
            SELECT trello_field_id, options FROM sync_custom_fields
            WHERE account_id = \(accountID) AND trello_board_id = \(boardID) AND lower(name) = 'priority'
            """, logger
        ).first.map { priorityField(fieldID: try $0.text(0), options: try $0.text(1)) }
    }

    public func savePriorityField(accountID: String, boardID: String, field: PriorityField?) async throws {
        guard let field else { return }
        let options = field.storedOptions
        let now = Timestamp.now()
        try await write { [self] c in
            try await c.run(
                """
                INSERT INTO sync_custom_fields (account_id, trello_board_id, trello_field_id, name, type, options, fetched_at)
                VALUES (\(accountID), \(boardID), \(field.fieldID), 'Priority', 'list', \(options), \(now))
                ON CONFLICT (account_id, trello_board_id, trello_field_id) DO UPDATE SET options = excluded.options, fetched_at = excluded.fetched_at
                """, logger)
        }
    }

    @discardableResult
    public func apply(_ observations: [CardObservation]) async throws -> AppliedChanges {
        guard !observations.isEmpty else { return AppliedChanges() }
        let keys = observations.map { AccountScoped($0.accountID, $0.cardID) }
        return try await write { [self] c in
            try await Self.lockAccounts(c, keys.map(\.accountID), logger: logger)
            var applier = ChangeApplier(rows: try await PostgresChangeRows.load(c, keys: keys, logger: logger))
            for observation in observations { try applier.apply(observation) }
            try await applier.rows.flush(c, logger: logger)
            return AppliedChanges(written: applier.written, accounts: applier.accounts, types: applier.types)
        }
    }

    // MARK: Reading changes

    public func pendingChanges<Sink: PendingChangeSink>(accountID: String, afterID: Int64, limit: Int, into sink: Sink) async throws -> Sink {
        try await read { [self] c in
            try await c.changes(
                """
                SELECT \(unescaped: PendingChange.columns) FROM pending_changes p
                WHERE p.account_id = \(accountID) AND NOT p.superseded AND p.id > \(afterID) ORDER BY p.id LIMIT \(Int64(min(limit, Int(Int64.max))))
                """, into: sink, logger)
        }
    }

    public func claimChanges<Sink: PendingChangeSink>(
        accountID: String, claim: ChangeClaim, afterID: Int64, limit: Int, into sink: Sink
    ) async throws
        -> Sink?
    {
        try await write { [self] c in
            // The account's lock, as the worker takes it to write changes: two devices pulling at once hand out each
            // change once, and a change is not folded away between the read and the hold.
            try await Self.lockAccounts(c, [accountID], logger: logger)
            guard try await !c.rows("SELECT 1 FROM devices WHERE account_id = \(accountID) AND device_id = \(claim.deviceID)", logger).isEmpty else {
                return nil
            }
            let read = try await c.changes(
                """
                SELECT \(unescaped: PendingChange.columns) FROM pending_changes p
                WHERE p.account_id = \(accountID) AND NOT p.superseded AND p.id > \(afterID) AND p.id <= \(claim.throughID)
                    AND (p.claimed_by IS NULL OR p.claimed_until <= \(claim.now) OR (p.claimed_by = \(claim.deviceID) AND \(claim.includeOwn)))
                    AND (p.declined_by IS NULL OR p.declined_by <> \(claim.deviceID) OR p.claimed_until <= \(claim.now))
                ORDER BY p.id LIMIT \(Int64(min(limit, Int(Int64.max))))
                """, into: sink, logger)
            if read.lastTaken > afterID {
                try await c.run(
                    """
                    UPDATE pending_changes p SET claimed_by = \(claim.deviceID), claimed_until = \(claim.until)
                    WHERE p.account_id = \(accountID) AND NOT p.superseded AND p.id > \(afterID) AND p.id <= \(min(read.lastTaken, claim.throughID))
                        AND (p.claimed_by IS NULL OR p.claimed_until <= \(claim.now) OR (p.claimed_by = \(claim.deviceID) AND \(claim.includeOwn)))
                        AND (p.declined_by IS NULL OR p.declined_by <> \(claim.deviceID) OR p.claimed_until <= \(claim.now))
                    """, logger)
            }
            return read
        }
    }

    public func releaseClaims(accountID: String, deviceID: String, ids: [Int64]?, declinedUntil: Int64) async throws -> Int {
        try await write { [self] c in
            // Under the account's lock, as a claim reads and holds: a claim never holds a change it did not read.
            try await Self.lockAccounts(c, [accountID], logger: logger)
            // For ids, the live change of each card named (a change folded into a newer one passed its hold on to it).
            let rows =
                if let ids {
                    try await c.rows(
                        """
                        UPDATE pending_changes SET claimed_by = NULL, claimed_until = \(declinedUntil), declined_by = \(deviceID)
                        WHERE account_id = \(accountID) AND claimed_by = \(deviceID) AND NOT superseded AND trello_card_id IN (
                            SELECT trello_card_id FROM pending_changes WHERE account_id = \(accountID) AND id = ANY(\(ids)::int8[]))
                        RETURNING id
                        """, logger)
                } else {
                    try await c.rows(
                        """
                        UPDATE pending_changes SET claimed_by = NULL, claimed_until = \(declinedUntil), declined_by = \(deviceID)
                        WHERE account_id = \(accountID) AND claimed_by = \(deviceID) AND NOT superseded RETURNING id
                        """, logger)
                }
            return rows.count
        }
    }

    public func accountsWithLapsedHolds(after: Int64, through: Int64) async throws -> [String] {
        try await read { [self] c in
            try await c.rows(
                """
                SELECT DISTINCT account_id FROM pending_changes
                WHERE claimed_until IS NOT NULL AND claimed_until > \(after) AND claimed_until <= \(through) AND NOT superseded
                """, logger
            ).map { try $0.text(0) }
        }
    }

    /// Every pending change of every account, oldest first (tests and operators).
    public func allPendingChanges() async throws -> [PendingChange] {
        let accounts = try await read { [self] c in
            try await c.rows("SELECT DISTINCT account_id FROM pending_changes", logger).map { try $0.text(0) }
        }
        var all: [PendingChange] = []
        for account in accounts { all += try await pendingChanges(accountID: account, afterID: 0, limit: Int.max) }
        return all.sorted { $0.id < $1.id }
    }

    public func routingSnapshot() async throws -> RoutingSnapshot {
        try await read { [self] c in
            var secrets: [String: String] = [:]
            for row in try await c.rows("SELECT id, trello_webhook_secret FROM accounts WHERE trello_webhook_secret IS NOT NULL", logger) {
                secrets[try row.text(0)] = try row.text(1)
            }
            var routes: [String: Set<String>] = [:]
            for row in try await c.rows("SELECT account_id, trello_list_id, trello_board_id FROM sync_lists", logger) {
                let account = try row.text(0)
                routes[try row.text(1), default: []].insert(account)
                routes[try row.text(2), default: []].insert(account)
            }
            var tokens: [String: String] = [:]
            for row in try await c.rows("SELECT id, webhook_token FROM accounts WHERE webhook_token IS NOT NULL", logger) {
                tokens[try row.text(0)] = try row.text(1)
            }
            return RoutingSnapshot(secrets: secrets, routes: routes, tokens: tokens)
        }
    }
}

/// `ChangeApplier`'s rows on PostgreSQL: every task and unacknowledged change of the batch's cards is read in two
/// queries, the applier works in memory, and `flush` writes the outcome in three statements. The caller holds the
/// cards' advisory locks, so nothing else changes those rows in between.
struct PostgresChangeRows: ChangeRows {
    private struct TaskWrite {
        var syncListID: String
        var stamps: String
        /// The card's values to set (`FieldValues`), those of every write of the card in this batch.
        var values: [String: JSONValue]
        var deleted: Bool
        var actionID: String?
        var now: String
    }

    /// A task's values after a write (`FieldValues`): the write's over the stored, each field whole; none, unchanged.
    static let valuesUpdate =
        "CASE WHEN excluded.field_values IS NULL THEN sync_tasks.field_values ELSE COALESCE(sync_tasks.field_values, '{}'::jsonb) || excluded.field_values END"

    private var tasks: [AccountScoped: ChangeApplier<Self>.TaskRow] = [:]
    /// The settings of the lists the batch names, read up front; a list not read is read when asked for (`listRules`
    /// has no connection, so `load` reads every list of the batch's accounts).
    private var lists: [String: ChangeApplier<Self>.ListRules] = [:]
    private var latest: [AccountScoped: ChangeApplier<Self>.ChangeRow] = [:]
    private var taskWrites: [AccountScoped: TaskWrite] = [:]
    private var taskOrder: [AccountScoped] = []
    private var supersededIDs: [Int64] = []
    private var inserts: [(change: ChangeApplier<Self>.NewChange, now: String, superseded: Bool)] = []
    // The outbound rules' writes (`OutboundRows`), flushed before the change rows.
    private var outboundTasks: [AccountScoped: OutboundTask] = [:]
    private var outboundOrder: [AccountScoped] = []
    private var deletedTasks: [AccountScoped] = []
    private var droppedChanges: [AccountScoped] = []
    private var openConflicts: [AccountScoped: [String: Int64]] = [:]
    private var conflictWrites: [(id: Int64?, conflict: StoredConflict)] = []
    private var activity: [PostgresStore.ActivityRow] = []

    /// The open conflicts of these cards, for `openConflictID`.
    mutating func loadOpenConflicts(_ c: PostgresConnection, keys: [AccountScoped], logger: Logger) async throws {
        let accounts = keys.map(\.accountID), cards = keys.map(\.id)
        for row in try await c.rows(
            """
            SELECT f.account_id, f.trello_card_id, f.field, f.id FROM conflicts f
            JOIN (SELECT DISTINCT a, k FROM unnest(\(accounts)::text[], \(cards)::text[]) AS u(a, k)) u ON f.account_id = u.a AND f.trello_card_id = u.k
            WHERE f.status = \(ConflictStatus.open.rawValue)
            FOR UPDATE OF f
            """, logger)
        {
            openConflicts[AccountScoped(try row.text(0), try row.text(1)), default: [:]][try row.text(2)] = try row.int64(3)
        }
    }

    static func load(_ c: PostgresConnection, keys: [AccountScoped], logger: Logger) async throws -> Self {
        var rows = Self()
        let accounts = keys.map(\.accountID), cards = keys.map(\.id)
        for row in try await c.rows(
            """
            SELECT t.sync_list_id, t.field_hashes, t.deleted, t.reminder_id, t.field_values IS NOT NULL, t.account_id, t.trello_card_id
            FROM sync_tasks t
            JOIN (SELECT DISTINCT a, k FROM unnest(\(accounts)::text[], \(cards)::text[]) AS u(a, k)) u ON t.account_id = u.a AND t.trello_card_id = u.k
            """, logger)
        {
            // The columns `TaskRow` reads, then the key.
            rows.tasks[AccountScoped(try row.text(5), try row.text(6))] = try .init(stored: row)
        }
        for row in try await c.rows(
            """
            SELECT p.id, p.change_type, p.changed_fields, p.fields, p.claimed_by, COALESCE(p.claimed_until, 0), p.from_sync_list_id, u.a, u.k
            FROM (SELECT DISTINCT a, k FROM unnest(\(accounts)::text[], \(cards)::text[]) AS u(a, k)) u
            CROSS JOIN LATERAL (
                SELECT id, change_type, changed_fields, fields, claimed_by, claimed_until, from_sync_list_id FROM pending_changes
                WHERE account_id = u.a AND trello_card_id = u.k AND NOT superseded ORDER BY id DESC LIMIT 1
            ) p
            """, logger)
        {
            // The columns `ChangeRow` reads, then the key.
            rows.latest[AccountScoped(try row.text(7), try row.text(8))] = try .init(stored: row)
        }
        for row in try await c.rows(
            "SELECT created_at, settings, id FROM sync_lists WHERE account_id = ANY(\(Array(Set(accounts)))::text[])", logger)
        {
            rows.lists[try row.text(2)] = try .init(stored: row)
        }
        return rows
    }

    func listRules(syncListID: String) -> ChangeApplier<Self>.ListRules? { lists[syncListID] }

    func task(accountID: String, cardID: String) -> ChangeApplier<Self>.TaskRow? {
        tasks[AccountScoped(accountID, cardID)]
    }

    private mutating func recordTask(_ key: AccountScoped, _ write: TaskWrite) {
        Self.keep(write, key, in: &taskWrites, order: &taskOrder, values: \.values)
    }

    /// Keeps a card's latest write (its first in `order`), with the values of every write of the card in the batch.
    fileprivate static func keep<Write>(
        _ write: Write, _ key: AccountScoped, in writes: inout [AccountScoped: Write], order: inout [AccountScoped],
        values: WritableKeyPath<Write, [String: JSONValue]>
    ) {
        var write = write
        if let earlier = writes[key] {
            write[keyPath: values] = earlier[keyPath: values].merging(write[keyPath: values]) { _, later in later }
        } else {
            order.append(key)
        }
        writes[key] = write
    }

    mutating func updateTask(
        accountID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], deleted: Bool?, actionID: String?,
        now: String
    ) {
        let key = AccountScoped(accountID, cardID)
        guard var task = tasks[key] else { return }
        task.stamps = stamps
        if let deleted { task.deleted = deleted }
        if !values.isEmpty { task.hasValues = true }
        tasks[key] = task
        recordTask(
            key,
            TaskWrite(
                syncListID: task.syncListID, stamps: FieldStamps.encode(stamps), values: values, deleted: task.deleted, actionID: actionID, now: now))
    }

    mutating func upsertTask(
        accountID: String, syncListID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], actionID: String?,
        now: String
    ) {
        let key = AccountScoped(accountID, cardID)
        tasks[key] = .init(syncListID: syncListID, stamps: stamps, deleted: false, reminderID: tasks[key]?.reminderID)
        recordTask(
            key, TaskWrite(syncListID: syncListID, stamps: FieldStamps.encode(stamps), values: values, deleted: false, actionID: actionID, now: now))
    }

    func latestChange(accountID: String, cardID: String) -> ChangeApplier<Self>.ChangeRow? {
        latest[AccountScoped(accountID, cardID)]
    }

    /// Ids below zero are rows of this batch not yet written (-1 is the first).
    mutating func supersede(changeID: Int64, accountID: String, cardID: String) {
        if changeID < 0 {
            inserts[Int(-changeID) - 1].superseded = true
        } else {
            supersededIDs.append(changeID)
        }
        // By its card, not by a walk over every card's latest change (that walk, copying each row, was quadratic in
        // the batch's cards: a tenth of the worker's instructions on PostgreSQL).
        latest[AccountScoped(accountID, cardID)] = nil
    }

    mutating func insertActivity(accountID: String, _ activity: NewActivity, now: String) {
        self.activity.append((accountID, activity, now))
    }

    mutating func insertChange(_ change: ChangeApplier<Self>.NewChange, now: String) {
        inserts.append((change, now, false))
        latest[AccountScoped(change.accountID, change.cardID)] = change.row(id: -Int64(inserts.count))
    }

    /// Writes what the rules decided, in order; returns the ids of the conflicts it inserted.
    @discardableResult
    func flush(_ c: PostgresConnection, logger: Logger) async throws -> [Int64] {
        if !outboundOrder.isEmpty {
            let tasks = outboundOrder.map { outboundTasks[$0]! }
            // Arrays cannot hold NULL through these bindings: an absent reminder or sync time travels as "".
            try await c.run(
                """
                INSERT INTO sync_tasks
                    (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, field_values, deleted, last_synced_at, created_at, updated_at)
                SELECT a, l, k, NULLIF(r, ''), h, NULLIF(v, '')::jsonb, d, NULLIF(s, ''), n, n
                FROM unnest(\(tasks.map(\.accountID))::text[], \(tasks.map(\.syncListID))::text[], \(tasks.map(\.cardID))::text[],
                            \(tasks.map { $0.reminderID ?? "" })::text[], \(tasks.map { FieldStamps.encode($0.stamps) })::text[],
                            \(tasks.map { FieldValues.patch($0.values) })::text[], \(tasks.map(\.deleted))::bool[],
                            \(tasks.map { $0.syncedAt ?? "" })::text[], \(tasks.map(\.now))::text[]) AS t(a, l, k, r, h, v, d, s, n)
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                    reminder_id = COALESCE(excluded.reminder_id, sync_tasks.reminder_id), field_hashes = excluded.field_hashes,
                    field_values = \(unescaped: Self.valuesUpdate), deleted = excluded.deleted,
                    last_synced_at = COALESCE(excluded.last_synced_at, sync_tasks.last_synced_at), updated_at = excluded.updated_at
                """, logger)
        }
        for key in deletedTasks {
            try await c.run("DELETE FROM sync_tasks WHERE account_id = \(key.accountID) AND trello_card_id = \(key.id)", logger)
        }
        for key in droppedChanges {
            try await c.run("DELETE FROM pending_changes WHERE account_id = \(key.accountID) AND trello_card_id = \(key.id)", logger)
        }
        try await flushChanges(c, logger: logger)
        var inserted: [Int64] = []
        for (id, f) in conflictWrites {
            if let id {
                try await c.run(
                    """
                    UPDATE conflicts SET trello_value = \(f.trelloValueJSON), reminders_value = \(f.remindersValueJSON),
                        reminder_id = COALESCE(\(f.reminderID)::text, reminder_id), job_id = \(f.jobID) WHERE id = \(id)
                    """, logger)
            } else {
                let row = try await c.rows(
                    """
                    INSERT INTO conflicts (account_id, sync_list_id, sync_task_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, job_id)
                    VALUES (\(f.accountID), \(f.syncListID), (SELECT id FROM sync_tasks WHERE account_id = \(f.accountID) AND trello_card_id = \(f.cardID)),
                        \(f.cardID), \(f.reminderID), \(f.field), \(f.trelloValueJSON), \(f.remindersValueJSON), \(ConflictStatus.open.rawValue),
                        \(f.now), \(f.jobID))
                    RETURNING id
                    """, logger)
                inserted.append(try row[0].int64(0))
            }
        }
        // Written with the pending changes when there are any (`flushChanges`).
        if inserts.isEmpty { try await PostgresStore.insertActivity(c, activity, logger: logger) }
        return inserted
    }

    private func flushChanges(_ c: PostgresConnection, logger: Logger) async throws {
        if !taskOrder.isEmpty {
            let writes = taskOrder.map { taskWrites[$0]! }
            // Arrays cannot hold NULL through these bindings: an absent action id travels as "".
            try await c.run(
                """
                INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, field_hashes, field_values, deleted, last_action_id, created_at, updated_at)
                SELECT a, l, k, h, NULLIF(v, '')::jsonb, d, NULLIF(x, ''), n, n
                FROM unnest(\(taskOrder.map(\.accountID))::text[], \(writes.map(\.syncListID))::text[], \(taskOrder.map(\.id))::text[],
                            \(writes.map(\.stamps))::text[], \(writes.map { FieldValues.patch($0.values) })::text[], \(writes.map(\.deleted))::bool[],
                            \(writes.map { $0.actionID ?? "" })::text[], \(writes.map(\.now))::text[]) AS t(a, l, k, h, v, d, x, n)
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id, field_hashes = excluded.field_hashes,
                    field_values = \(unescaped: Self.valuesUpdate), deleted = excluded.deleted, last_action_id = excluded.last_action_id,
                    updated_at = excluded.updated_at
                """, logger)
        }
        if !supersededIDs.isEmpty {
            try await c.run("UPDATE pending_changes SET superseded = true WHERE id = ANY(\(supersededIDs)::int8[])", logger)
        }
        if !inserts.isEmpty {
            let changes = inserts.map(\.change)
            // The batch's history rides along as the statement's `WITH`: one round trip for both.
            var sql = PostgresQuery.StringInterpolation(literalCapacity: 2048, interpolationCount: 24)
            if !activity.isEmpty {
                sql.appendLiteral("WITH activity_rows AS (")
                PostgresStore.appendActivityInsert(&sql, activity)
                sql.appendLiteral(") ")
            }
            sql.appendLiteral(
                """
                INSERT INTO pending_changes
                    (account_id, sync_list_id, change_type, changed_fields, fields, trello_card_id, trello_action_id, created_at, superseded, reminder_id,
                     claimed_by, claimed_until, from_sync_list_id, declined_by)
                SELECT a, l, t, cf, f, k, NULLIF(x, ''), n, s,
                    (SELECT r.reminder_id FROM sync_tasks r WHERE r.account_id = u.a AND r.trello_card_id = u.k),  -- the task's as it is now (v11)
                    NULLIF(cb, ''), NULLIF(cu, 0), NULLIF(fl, ''), NULLIF(db, '')
                FROM unnest(
                """)
            let texts: [[String]] = [
                changes.map(\.accountID), changes.map(\.syncListID), changes.map(\.type.storedName), changes.map(\.changedFieldsJSON),
                changes.map(\.fieldsJSON), changes.map(\.cardID), changes.map { $0.actionID ?? "" }, inserts.map(\.now),
            ]
            for array in texts {
                sql.appendInterpolation(array)
                sql.appendLiteral("::text[], ")
            }
            sql.appendInterpolation(inserts.map(\.superseded))
            sql.appendLiteral("::bool[], ")
            // A hold passed on from a folded change (none: "" and 0, as arrays cannot hold NULL through these bindings).
            sql.appendInterpolation(changes.map { $0.claim?.deviceID ?? "" })
            sql.appendLiteral("::text[], ")
            sql.appendInterpolation(changes.map { $0.claim?.until ?? $0.declined?.until ?? 0 })
            sql.appendLiteral("::int8[], ")
            sql.appendInterpolation(changes.map { $0.fromSyncListID ?? "" })
            sql.appendLiteral("::text[], ")
            // A device the change is not handed to until `claimed_until` (none: "").
            sql.appendInterpolation(changes.map { $0.declined?.deviceID ?? "" })
            sql.appendLiteral("::text[]) WITH ORDINALITY AS u(a, l, t, cf, f, k, x, n, s, cb, cu, fl, db, o) ORDER BY o")
            try await c.run(PostgresQuery(stringInterpolation: sql), logger)
        }
    }
}

extension PostgresChangeRows: OutboundRows {
    mutating func putTask(_ t: OutboundTask) {
        let key = AccountScoped(t.accountID, t.cardID)
        let previous = tasks[key]
        tasks[key] = .init(
            syncListID: t.syncListID, stamps: t.stamps, deleted: t.deleted, reminderID: t.reminderID ?? previous?.reminderID,
            hasValues: !t.values.isEmpty || (previous?.hasValues ?? false))
        Self.keep(t, key, in: &outboundTasks, order: &outboundOrder, values: \.values)
    }

    mutating func deleteTask(accountID: String, cardID: String) {
        let key = AccountScoped(accountID, cardID)
        tasks[key] = nil
        deletedTasks.append(key)
    }

    mutating func dropChanges(accountID: String, cardID: String) {
        let key = AccountScoped(accountID, cardID)
        latest[key] = nil
        droppedChanges.append(key)
    }

    func openConflictID(accountID: String, cardID: String, field: String) -> Int64? {
        openConflicts[AccountScoped(accountID, cardID)]?[field]
    }

    mutating func updateConflict(id: Int64, _ conflict: StoredConflict) {
        conflictWrites.append((id, conflict))
    }

    mutating func insertConflict(_ conflict: StoredConflict) -> Int64? {
        conflictWrites.append((nil, conflict))
        return nil
    }
}
