import Foundation
import GRDB
import RoundupCore
import RoundupStore

/// The SQLite rows: one prepared statement per call, in the caller's write transaction.
struct SQLiteChangeRows: ChangeRows {
    let db: Database

    private static let taskSQL = "SELECT \(ChangeApplier<Self>.TaskRow.columns) FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?"

    func task(accountID: String, cardID: String) throws -> ChangeApplier<Self>.TaskRow? {
        try db.first(Self.taskSQL, [accountID, cardID], ChangeApplier<Self>.TaskRow.init(stored:))
    }

    /// The statements `updateTask` runs, by how many values they set (`FieldValues.sqliteSet`) and whether they set
    /// `deleted`: made once, the hottest write of the worker.
    private static let updateStatements: [[String]] = (0...SyncField.allCases.count).map { count in
        [false, true].map { deleted in
            """
            UPDATE sync_tasks SET field_hashes = ?, field_values = \(FieldValues.sqliteSet(over: "field_values", count: count))\(deleted ? ", deleted = ?" : ""),
                last_action_id = ?, updated_at = ?
            WHERE account_id = ? AND trello_card_id = ?
            """
        }
    }

    func updateTask(
        accountID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], deleted: Bool?, actionID: String?,
        now: String
    ) throws {
        let pairs = FieldValues.pairs(values)
        var arguments: [(any DatabaseValueConvertible)?] = [FieldStamps.encode(stamps)]
        arguments.reserveCapacity(6 + 2 * pairs.count)
        FieldValues.appendSQLite(pairs, to: &arguments)
        if let deleted { arguments.append(deleted) }
        arguments += [actionID, now, accountID, cardID]
        let sql =
            pairs.count < Self.updateStatements.count
            ? Self.updateStatements[pairs.count][deleted == nil ? 0 : 1]
            : """
            UPDATE sync_tasks SET field_hashes = ?, field_values = \(FieldValues.sqliteSet(over: "field_values", count: pairs.count))\(deleted == nil ? "" : ", deleted = ?"),
                last_action_id = ?, updated_at = ?
            WHERE account_id = ? AND trello_card_id = ?
            """
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(arguments))
    }

    func upsertTask(
        accountID: String, syncListID: String, cardID: String, stamps: [String: FieldStamps.Stamp], values: [String: JSONValue], actionID: String?,
        now: String
    ) throws {
        let pairs = FieldValues.pairs(values)
        var arguments: [(any DatabaseValueConvertible)?] = [accountID, syncListID, cardID, FieldStamps.encode(stamps)]
        arguments.reserveCapacity(7 + 4 * pairs.count)
        FieldValues.appendSQLite(pairs, to: &arguments)
        arguments += [actionID, now, now]
        FieldValues.appendSQLite(pairs, to: &arguments)
        try db.cachedStatement(
            sql: """
                INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, field_hashes, field_values, deleted, last_action_id, created_at, updated_at)
                VALUES (?, ?, ?, ?, \(FieldValues.sqliteSet(over: nil, count: pairs.count)), 0, ?, ?, ?)
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                    field_hashes = excluded.field_hashes, field_values = \(FieldValues.sqliteSet(over: "sync_tasks.field_values", count: pairs.count)),
                    deleted = 0, last_action_id = excluded.last_action_id, updated_at = excluded.updated_at
                """
        ).execute(arguments: StatementArguments(arguments))
    }

    private static let latestChangeSQL = """
        SELECT \(ChangeApplier<Self>.ChangeRow.columns) FROM pending_changes
        WHERE account_id = ? AND trello_card_id = ? AND superseded = 0 ORDER BY id DESC LIMIT 1
        """

    func latestChange(accountID: String, cardID: String) throws -> ChangeApplier<Self>.ChangeRow? {
        try db.first(Self.latestChangeSQL, [accountID, cardID], ChangeApplier<Self>.ChangeRow.init(stored:))
    }

    func supersede(changeID: Int64, accountID: String, cardID: String) throws {
        try db.cachedStatement(sql: "UPDATE pending_changes SET superseded = 1 WHERE id = ?").execute(arguments: [changeID])
    }

    private static let listRulesSQL = "SELECT \(ChangeApplier<Self>.ListRules.columns) FROM sync_lists WHERE id = ?"

    func listRules(syncListID: String) throws -> ChangeApplier<Self>.ListRules? {
        try db.first(Self.listRulesSQL, [syncListID], ChangeApplier<Self>.ListRules.init(stored:))
    }

    func insertActivity(accountID: String, _ activity: NewActivity, now: String) throws {
        try SQLiteStore.insertActivity(db, accountID: accountID, activity, now: now)
    }

    func insertChange(_ c: ChangeApplier<Self>.NewChange, now: String) throws {
        // The change carries its task's reminder as the task is now (v11-changes-carry-reminder).
        try db.cachedStatement(
            sql: """
                INSERT INTO pending_changes
                    (account_id, sync_list_id, change_type, changed_fields, fields, trello_card_id, trello_action_id, created_at, reminder_id,
                     claimed_by, claimed_until, from_sync_list_id, declined_by)
                VALUES (
                    ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, (SELECT reminder_id FROM sync_tasks WHERE account_id = ?1 AND trello_card_id = ?6), ?9, ?10, ?11,
                    ?12)
                """
        ).execute(arguments: [
            c.accountID, c.syncListID, c.type.storedName, c.changedFieldsJSON, c.fieldsJSON, c.cardID, c.actionID, now, c.claim?.deviceID,
            c.claim?.until ?? c.declined?.until, c.fromSyncListID, c.declined?.deviceID,
        ])
    }
}

extension SQLiteChangeRows: OutboundRows {
    func putTask(_ t: OutboundTask) throws {
        let pairs = FieldValues.pairs(t.values)
        var arguments: [(any DatabaseValueConvertible)?] = [t.accountID, t.syncListID, t.cardID, t.reminderID, FieldStamps.encode(t.stamps)]
        arguments.reserveCapacity(9 + 4 * pairs.count)
        FieldValues.appendSQLite(pairs, to: &arguments)
        arguments += [t.deleted, t.syncedAt, t.now, t.now]
        FieldValues.appendSQLite(pairs, to: &arguments)
        try db.cachedStatement(
            sql: """
                INSERT INTO sync_tasks
                    (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, field_values, deleted, last_synced_at, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, \(FieldValues.sqliteSet(over: nil, count: pairs.count)), ?, ?, ?, ?)
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                    reminder_id = COALESCE(excluded.reminder_id, reminder_id), field_hashes = excluded.field_hashes,
                    field_values = \(FieldValues.sqliteSet(over: "sync_tasks.field_values", count: pairs.count)),
                    deleted = excluded.deleted, last_synced_at = COALESCE(excluded.last_synced_at, last_synced_at), updated_at = excluded.updated_at
                """
        ).execute(arguments: StatementArguments(arguments))
    }

    func deleteTask(accountID: String, cardID: String) throws {
        try db.cachedStatement(sql: "DELETE FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?").execute(arguments: [accountID, cardID])
    }

    func dropChanges(accountID: String, cardID: String) throws {
        try db.cachedStatement(sql: "DELETE FROM pending_changes WHERE account_id = ? AND trello_card_id = ?").execute(arguments: [accountID, cardID])
    }

    func openConflictID(accountID: String, cardID: String, field: String) throws -> Int64? {
        try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT id FROM conflicts WHERE account_id = ? AND trello_card_id = ? AND field = ? AND status = ?"),
            arguments: [accountID, cardID, field, ConflictStatus.open])
    }

    func updateConflict(id: Int64, _ c: StoredConflict) throws {
        try db.cachedStatement(
            sql: "UPDATE conflicts SET trello_value = ?, reminders_value = ?, reminder_id = COALESCE(?, reminder_id), job_id = ? WHERE id = ?"
        )
        .execute(arguments: [c.trelloValueJSON, c.remindersValueJSON, c.reminderID, c.jobID, id])
    }

    func insertConflict(_ c: StoredConflict) throws -> Int64? {
        try db.cachedStatement(
            sql: """
                INSERT INTO conflicts (account_id, sync_list_id, sync_task_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, job_id)
                VALUES (?, ?, (SELECT id FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?), ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            c.accountID, c.syncListID, c.accountID, c.cardID, c.cardID, c.reminderID, c.field, c.trelloValueJSON, c.remindersValueJSON,
            ConflictStatus.open, c.now, c.jobID,
        ])
        return db.lastInsertedRowID
    }
}

extension FieldValues {
    /// SQL setting `count` values over the column `base` (nil: no stored values, a new row): `json_set` replaces each
    /// value whole (`json_patch` would merge an object's keys and drop a null). Each value takes two arguments, its path
    /// and its JSON (`appendSQLite`), so a statement's text depends only on how many values it sets.
    static func sqliteSet(over base: String?, count: Int) -> String {
        guard count > 0 else { return base ?? "NULL" }
        return "json_set(" + (base.map { "COALESCE(\($0), '{}')" } ?? "'{}'") + String(repeating: ", ?, json(?)", count: count) + ")"
    }

    /// Each field's JSON path (`$."due_date"`), made once.
    private static let paths: [String: String] = Dictionary(uniqueKeysWithValues: SyncField.allCases.map { ($0.rawValue, "$.\"\($0.rawValue)\"") })

    /// The arguments of `sqliteSet` for these values, in order.
    static func appendSQLite(_ pairs: [(field: String, json: String)], to arguments: inout [(any DatabaseValueConvertible)?]) {
        for pair in pairs {
            arguments.append(paths[pair.field])  // every pair is a field's (`pairs`)
            arguments.append(pair.json)
        }
    }
}
