import Foundation
import GRDB
import Logging
import PostgresNIO
import RoundupCore
import RoundupTesting
import Testing

@testable import RoundupPostgres
@testable import RoundupSQLite
@testable import RoundupStore

/// A pending change carries its card's reminder (migration v11), so the changes page reads it without a lookup per
/// change in `sync_tasks`. What the apps see must be what that lookup gave: the card's task's reminder, now.
@Suite struct ChangeReminderTests {
    /// Each pending change whose stored reminder differs from its card's task's (`id: stored ≠ task's`): empty when
    /// every change says what the join the page made before v11 said.
    static func drift(_ store: any ServerStore) async throws -> [String] {
        let join = "FROM pending_changes p LEFT JOIN sync_tasks t ON t.account_id = p.account_id AND t.trello_card_id = p.trello_card_id"
        if let sqlite = store as? SQLiteStore {
            return try await sqlite.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT p.id, p.reminder_id, t.reminder_id \(join) WHERE p.reminder_id IS NOT t.reminder_id").map { row in
                    "\(row[0] as Int64): \(row[1] as String? ?? "nil") ≠ \(row[2] as String? ?? "nil")"
                }
            }
        }
        let postgres = try #require(store as? PostgresStore)
        return try await postgres.read { c in
            try await c.rows(
                PostgresQuery(unsafeSQL: "SELECT p.id, p.reminder_id, t.reminder_id \(join) WHERE p.reminder_id IS DISTINCT FROM t.reminder_id"),
                postgres.logger
            ).map { row in "\(try row.int64(0)): \(try row.optionalText(1) ?? "nil") ≠ \(try row.optionalText(2) ?? "nil")" }
        }
    }

    /// Runs a statement as it is on either store (tests only: the values in it are the fixture's).
    static func execute(_ store: any ServerStore, _ statement: String) async throws {
        if let sqlite = store as? SQLiteStore {
            try await sqlite.pool.write { db in try db.execute(sql: statement) }
        } else {
            let postgres = try #require(store as? PostgresStore)
            try await postgres.write { c in try await c.run(PostgresQuery(unsafeSQL: statement), postgres.logger) }
        }
    }

    /// Every way a card's reminder is set or changed — an app's ack of a create (and of a create folded into a newer
    /// change), a sync job's write for a reminder, an edit of a mapped card — leaves each pending change (superseded
    /// ones too) with its task's reminder; deleting a list with such changes deletes them (the triggers do not stand
    /// in the cascade's way).
    @Test(arguments: StoreBackend.available) func aChangeCarriesItsCardsReminderWhateverSetsIt(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        for card in ["c1", "c2", "c3", "c4"] { _ = try await f.observe(card, .fields(fullCard("Card \(card)"), full: true), at: 1_700_000_000) }
        #expect(try await f.changes().map(\.reminderID) == [nil, nil, nil, nil])
        #expect(try await Self.drift(f.store) == [])

        // c1: the app acks the create with its reminder, then the card is edited: the edit carries the reminder.
        let creates = try await f.changes()
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: creates[0].id, reminderID: "R-1")])
        _ = try await f.observe("c1", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_010)
        // c2: an edit folds the create into a newer one; the app acks the older create with its reminder.
        _ = try await f.observe("c2", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_010)
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: creates[1].id, reminderID: "R-2")])
        // c3: a sync job wrote the app's reminder to the card, and Trello's title goes back to the apps.
        var write = SyncWrite(accountID: f.account, syncListID: f.list.id, cardID: "c3", reminderID: "R-3")
        write.toApps = ["title": .string("Trello's title")]
        _ = try await f.store.recordSyncWrite(write)

        let byCard = Dictionary(grouping: try await f.changes(), by: \.trelloCardID)
        #expect(byCard["c1"]?.map(\.reminderID) == ["R-1"])
        #expect(byCard["c2"]?.map(\.reminderID) == ["R-2"])
        #expect(byCard["c3"]?.isEmpty == false)
        #expect(byCard["c3"]?.allSatisfy { $0.reminderID == "R-3" } == true, "the create with Trello's title folded in")
        #expect(byCard["c4"]?.map(\.reminderID) == [nil], "never mapped")
        #expect(try await Self.drift(f.store) == [])
        // The stream and the operators read the same column as the page.
        #expect(try await f.store.unackedChange(accountID: f.account, cardID: "c3")?.reminderID == "R-3")

        _ = try await f.store.deleteSyncList(accountID: f.account, id: f.list.id)
        #expect(try await f.changes() == [])
        #expect(try await Self.drift(f.store) == [])
    }

    /// A store migrated before v11 gets its pending changes' reminders from their tasks when it migrates, and the
    /// triggers from then on. (Simulated: v11 undone on a store with mapped and unmapped changes, then migrated again.)
    @Test(arguments: StoreBackend.available) func migratingFillsTheRemindersOfChangesAlreadyPending(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        for card in ["c1", "c2"] { _ = try await f.observe(card, .fields(fullCard("Card \(card)"), full: true), at: 1_700_000_000) }
        let creates = try await f.changes()
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: creates[0].id, reminderID: "R-1")])
        _ = try await f.observe("c1", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_010)

        let undo = [
            "DROP TRIGGER sync_tasks_reminder_inserted", "DROP TRIGGER sync_tasks_reminder_updated", "DROP TRIGGER sync_tasks_reminder_deleted",
            "DROP TRIGGER pending_changes_reminder_inserted", "ALTER TABLE pending_changes DROP COLUMN reminder_id",
        ]
        if let sqlite = f.store as? SQLiteStore {
            try await sqlite.pool.write { db in
                for statement in undo { try db.execute(sql: statement) }
                try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v11-changes-carry-reminder'")
            }
        } else {
            let postgres = try #require(f.store as? PostgresStore)
            try await postgres.write { c in
                for statement in undo {
                    let table = statement.contains("pending_changes_reminder") ? " ON pending_changes" : " ON sync_tasks"
                    try await c.run(PostgresQuery(unsafeSQL: statement.hasPrefix("DROP TRIGGER") ? statement + table : statement), postgres.logger)
                }
                try await c.run("DROP FUNCTION pending_changes_follow_reminder()", postgres.logger)
                try await c.run("DROP FUNCTION pending_changes_take_reminder()", postgres.logger)
                try await c.run("DELETE FROM roundup_migrations WHERE version = 'v11-changes-carry-reminder'", postgres.logger)
            }
        }
        try await f.store.migrate()
        #expect(try await f.changes().map(\.reminderID) == [nil, "R-1"], "c2's create (no reminder yet), c1's edit")
        #expect(try await Self.drift(f.store) == [])
        // The triggers are back: c2's create acked with a reminder after an edit folded it reaches the newer change.
        _ = try await f.observe("c2", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_010)
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: creates[1].id, reminderID: "R-2")])
        #expect(try await f.changes().map(\.reminderID) == ["R-1", "R-2"])
        #expect(try await Self.drift(f.store) == [])
    }

    /// A change written without a reminder — by a process of the version before v11, still running while the new one
    /// migrates (a rolling upgrade) — takes its task's; and a task deleted, or made again with a reminder, by any
    /// statement moves the reminder of the changes its card still has.
    @Test(arguments: StoreBackend.available) func changesFollowTheirTaskWhoeverWritesEither(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        for card in ["c1", "c2"] { _ = try await f.observe(card, .fields(fullCard("Card \(card)"), full: true), at: 1_700_000_000) }
        let creates = try await f.changes()
        _ = try await f.store.acknowledge(
            accountID: f.account, acks: [ChangeAck(id: creates[0].id, reminderID: "R-1"), ChangeAck(id: creates[1].id, reminderID: "R-2")])
        _ = try await f.observe("c1", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_010)

        // The version before v11 inserts without the column: c2 (mapped) and c9 (no task).
        for card in ["c2", "c9"] {
            try await Self.execute(
                f.store,
                """
                INSERT INTO pending_changes (account_id, sync_list_id, change_type, changed_fields, fields, trello_card_id, trello_action_id, created_at)
                VALUES ('\(f.account)', '\(f.list.id)', 'update', '["title"]', '{"title":"Old writer"}', '\(card)', NULL, '2026-01-01T00:00:00.000Z')
                """)
        }
        #expect(try await f.changes().map(\.reminderID) == ["R-1", "R-2", nil])
        #expect(try await Self.drift(f.store) == [])

        // c1's task goes while its change stays, then comes back with another reminder.
        try await Self.execute(f.store, "DELETE FROM sync_tasks WHERE account_id = '\(f.account)' AND trello_card_id = 'c1'")
        #expect(try await f.changes().map(\.reminderID) == [nil, "R-2", nil])
        try await Self.execute(
            f.store,
            """
            INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, created_at, updated_at)
            VALUES ('\(f.account)', '\(f.list.id)', 'c1', 'R-1b', '{}', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')
            """)
        #expect(try await f.changes().map(\.reminderID) == ["R-1b", "R-2", nil])
        #expect(try await Self.drift(f.store) == [])

        // Deleting the account takes everything with it, triggers and all.
        _ = try await f.store.deleteAccount(id: f.account)
        #expect(try await f.changes() == [])
    }
}
