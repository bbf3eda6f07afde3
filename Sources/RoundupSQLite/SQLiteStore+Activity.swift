public import Foundation
import GRDB
import RoundupCore
public import RoundupStore

/// The activity history on SQLite: rows written in the caller's transaction, read newest first, pruned by age.
extension SQLiteStore: ActivityRepository {
    /// Built once: the statement cache is keyed by this text.
    static let insertActivitySQL = "INSERT INTO activity (\(NewActivity.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    static func insertActivity(_ db: Database, accountID: String, _ a: NewActivity, now: String) throws {
        try db.cachedStatement(sql: insertActivitySQL).execute(arguments: [
            accountID, a.syncListID, a.cardID, a.reminderID, a.kind, a.side, a.field, a.oldValueJSON, a.newValueJSON, a.rule, a.kept, a.message,
            a.jobID, a.trelloActionID, now,
        ])
    }

    public func recordActivity(accountID: String, _ rows: [NewActivity]) async throws {
        guard !rows.isEmpty else { return }
        let now = Timestamp.now()
        try await pool.write { db in
            for row in rows { try Self.insertActivity(db, accountID: accountID, row, now: now) }
        }
    }

    public func activity(accountID: String, _ query: ActivityQuery) async throws -> [ActivityRecord] {
        try await pool.read { db in
            var sql = "SELECT \(ActivityRecord.columns) FROM activity WHERE account_id = ?"
            var arguments: StatementArguments = [accountID]
            if let list = query.syncListID {
                sql += " AND sync_list_id = ?"
                arguments += [list]
            }
            if let card = query.cardID {
                sql += " AND trello_card_id = ?"
                arguments += [card]
            }
            if let action = query.trelloActionID {
                sql += " AND trello_action_id = ?"
                arguments += [action]
            }
            if let reminder = query.reminderID {
                // The reminder's rows, and its card's from before (or without) the mapping.
                sql += """
                     AND (reminder_id = ? OR trello_card_id IN
                        (SELECT trello_card_id FROM sync_tasks WHERE account_id = ? AND reminder_id = ?))
                    """
                arguments += [reminder, accountID, reminder]
            }
            if let before = query.beforeID {
                sql += " AND id < ?"
                arguments += [before]
            }
            sql += " ORDER BY id DESC LIMIT ?"
            arguments += [query.limit]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(ActivityRecord.init(stored:))
        }
    }

    public func mappings(accountID: String, afterID: Int64, limit: Int) async throws -> [MappingRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT \(MappingRecord.columns) FROM sync_tasks WHERE account_id = ? AND id > ? ORDER BY id LIMIT ?",
                arguments: [accountID, afterID, limit]
            ).map(MappingRecord.init(stored:))
        }
    }

    /// Walks from the oldest row by id (ids grow with time), so it needs no index on the time.
    public func pruneActivity(before cutoff: Date, batch: Int) async throws -> Int {
        let cutoffText = Timestamp.string(cutoff)
        return try await pool.write { db in
            // The newest of the next `batch` oldest rows: if even it is old enough, they all go.
            guard
                let edge = try Row.fetchOne(
                    db, sql: "SELECT id, created_at FROM activity ORDER BY id LIMIT 1 OFFSET ?", arguments: [max(batch - 1, 0)])
            else {
                try db.execute(sql: "DELETE FROM activity WHERE created_at < ?", arguments: [cutoffText])
                return db.changesCount
            }
            let edgeID: Int64 = edge[0]
            let edgeTime: String = edge[1]
            if edgeTime < cutoffText {
                try db.execute(sql: "DELETE FROM activity WHERE id <= ?", arguments: [edgeID])
            } else {
                try db.execute(sql: "DELETE FROM activity WHERE id <= ? AND created_at < ?", arguments: [edgeID, cutoffText])
            }
            return db.changesCount
        }
    }
}
