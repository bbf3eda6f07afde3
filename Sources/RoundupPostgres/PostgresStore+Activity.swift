public import Foundation
import Logging
import PostgresNIO
import RoundupCore
public import RoundupStore

/// The activity history on PostgreSQL: rows written in one statement with the batch they describe, read newest
/// first, pruned by age.
extension PostgresStore: ActivityRepository {
    typealias ActivityRow = (accountID: String, activity: NewActivity, now: String)

    /// Inserts rows in one statement.
    static func insertActivity(_ c: PostgresConnection, _ rows: [ActivityRow], logger: Logger) async throws {
        guard !rows.isEmpty else { return }
        var sql = PostgresQuery.StringInterpolation(literalCapacity: 1024, interpolationCount: 15)
        appendActivityInsert(&sql, rows)
        try await c.run(PostgresQuery(stringInterpolation: sql), logger)
    }

    /// Appends `INSERT INTO activity … FROM unnest(…)` for `rows` to a statement being built: on its own, or as the
    /// `WITH` of the batch's insert of pending changes, so the history takes no round trip of its own. Arrays cannot
    /// hold NULL through these bindings: an absent value travels as "".
    static func appendActivityInsert(_ sql: inout PostgresQuery.StringInterpolation, _ rows: [ActivityRow]) {
        func column(_ value: (NewActivity) -> String?) -> [String] { rows.map { value($0.activity) ?? "" } }
        let arrays: [[String]] = [
            rows.map(\.accountID), column(\.syncListID), column(\.cardID), column(\.reminderID), rows.map(\.activity.kind.rawValue),
            column { $0.side?.rawValue }, column(\.field), column(\.oldValueJSON), column(\.newValueJSON), column { $0.rule?.rawValue },
            column { $0.kept?.rawValue }, column(\.message), column(\.jobID), column(\.trelloActionID), rows.map(\.now),
        ]
        sql.appendLiteral(
            """
            INSERT INTO activity (\(NewActivity.columns))
            SELECT a, NULLIF(l, ''), NULLIF(k, ''), NULLIF(r, ''), t, NULLIF(s, ''), NULLIF(f, ''), NULLIF(o, ''), NULLIF(v, ''), NULLIF(p, ''),
                   NULLIF(w, ''), NULLIF(m, ''), NULLIF(j, ''), NULLIF(x, ''), n
            FROM unnest(
            """)
        for (index, array) in arrays.enumerated() {
            if index > 0 { sql.appendLiteral(", ") }
            sql.appendInterpolation(array)
            sql.appendLiteral("::text[]")
        }
        sql.appendLiteral(") WITH ORDINALITY AS u(a, l, k, r, t, s, f, o, v, p, w, m, j, x, n, i) ORDER BY i")
    }

    public func recordActivity(accountID: String, _ rows: [NewActivity]) async throws {
        guard !rows.isEmpty else { return }
        let now = Timestamp.now()
        try await write { [logger] c in
            try await Self.insertActivity(c, rows.map { (accountID, $0, now) }, logger: logger)
        }
    }

    public func activity(accountID: String, _ query: ActivityQuery) async throws -> [ActivityRecord] {
        try await read { [logger] c in
            try await c.rows(
                """
                SELECT \(unescaped: ActivityRecord.columns) FROM activity
                WHERE account_id = \(accountID)
                  AND (\(query.syncListID)::text IS NULL OR sync_list_id = \(query.syncListID))
                  AND (\(query.cardID)::text IS NULL OR trello_card_id = \(query.cardID))
                  AND (\(query.trelloActionID)::text IS NULL OR trello_action_id = \(query.trelloActionID))
                  AND (\(query.reminderID)::text IS NULL OR reminder_id = \(query.reminderID) OR trello_card_id IN
                        (SELECT trello_card_id FROM sync_tasks WHERE account_id = \(accountID) AND reminder_id = \(query.reminderID)))
                  AND (\(query.beforeID)::int8 IS NULL OR id < \(query.beforeID))
                ORDER BY id DESC LIMIT \(Int64(query.limit))
                """, logger
            ).map(ActivityRecord.init(stored:))
        }
    }

    public func mappings(accountID: String, afterID: Int64, limit: Int) async throws -> [MappingRecord] {
        try await read { [logger] c in
            try await c.rows(
                """
                SELECT \(unescaped: MappingRecord.columns) FROM sync_tasks WHERE account_id = \(accountID) AND id > \(afterID)
                ORDER BY id LIMIT \(Int64(limit))
                """, logger
            ).map(MappingRecord.init(stored:))
        }
    }

    /// Walks from the oldest row by id (ids grow with time), so it needs no index on the time.
    public func pruneActivity(before cutoff: Date, batch: Int) async throws -> Int {
        let cutoffText = Timestamp.string(cutoff)
        return try await write { [logger] c in
            let edge = try await c.rows("SELECT id, created_at FROM activity ORDER BY id LIMIT 1 OFFSET \(Int64(max(batch - 1, 0)))", logger)
            guard let edge = edge.first else {
                return try await c.run("DELETE FROM activity WHERE created_at < \(cutoffText) RETURNING 1", logger)
            }
            let edgeID = try edge.int64(0)
            if try edge.text(1) < cutoffText {
                return try await c.run("DELETE FROM activity WHERE id <= \(edgeID) RETURNING 1", logger)
            }
            return try await c.run("DELETE FROM activity WHERE id <= \(edgeID) AND created_at < \(cutoffText) RETURNING 1", logger)
        }
    }
}
