import Foundation
import GRDB
import PostgresNIO
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

@testable import RoundupPostgres
@testable import RoundupSQLite

/// The schema's CHECK lists mirror the domain's enums: a value added to an enum and not to the schema would be refused
/// by the store at the first write, and one dropped from an enum would make a stored row unreadable. Read from the
/// schema the migrations leave on each backend (not from the migrations' text), so a later migration that rebuilds a
/// table counts.
@Suite struct SchemaVocabularyTests {
    /// Each `table.column` with a CHECK list, and the enum it mirrors. A new CHECK list must be added here.
    static let mirrors: [String: Set<String>] = [
        "accounts.conflict_policy": Set(ConflictPolicy.allCases.map(\.rawValue)),
        "accounts.delete_mode": Set(DeleteMode.allCases.map(\.rawValue)),
        // A move is stored as an update with the list it left (`ChangeType.storedName`).
        "pending_changes.change_type": Set(ChangeType.allCases.map(\.storedName)),
        "devices.platform": Set(DevicePlatform.allCases.map(\.rawValue)),
        "devices.environment": Set(APNsEnvironment.allCases.map(\.rawValue)),
        "conflicts.status": Set(ConflictStatus.allCases.map(\.rawValue)),
        "background_jobs.status": Set(JobStatus.allCases.map(\.rawValue)),
        "potential_duplicates.status": Set(DuplicateStatus.allCases.map(\.rawValue)),
    ]

    @Test(arguments: StoreBackend.available) func everyCheckListIsItsEnum(backend: StoreBackend) async throws {
        let (store, _) = try await TestStore.make(backend, "schema")
        let lists = try await Self.checkLists(store)
        #expect(Set(lists.keys) == Set(Self.mirrors.keys))
        for (column, values) in lists.sorted(by: { $0.key < $1.key }) {
            #expect(values == Self.mirrors[column], "\(column) on \(backend)")
        }
    }

    /// A new account starts with the policy the outbound rules use for an account the store does not have.
    @Test(arguments: StoreBackend.available) func aNewAccountHasTheDefaultPolicy(backend: StoreBackend) async throws {
        let (store, _) = try await TestStore.make(backend, "schema-defaults")
        let id = try await store.createAccount(authTokenHash: UUID().uuidString)
        let account = try #require(try await store.accountDetails(id: id))
        #expect(account.conflictPolicy == AccountDetails.missingAccountPolicy.policy)
        #expect(account.deleteMode == AccountDetails.missingAccountPolicy.deleteMode)
        #expect(try await store.conflictPolicy(accountID: "no-such-account") == AccountDetails.missingAccountPolicy)
    }

    /// `table.column` → the values of its `CHECK (column IN (…))`, as the backend holds its schema.
    static func checkLists(_ store: any ServerStore) async throws -> [String: Set<String>] {
        var lists: [String: Set<String>] = [:]
        if let sqlite = store as? SQLiteStore {
            let tables = try await sqlite.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL").map {
                    (name: $0[0] as String, sql: $0[1] as String)
                }
            }
            let check = /CHECK \((\w+) IN \(([^)]*)\)\)/
            for table in tables {
                for match in table.sql.matches(of: check) {
                    lists["\(table.name).\(match.1)"] = Set(match.2.matches(of: /'([^']*)'/).map { String($0.1) })
                }
            }
        } else {
            let postgres = try #require(store as? PostgresStore)
            let constraints = try await postgres.read { [logger = postgres.logger] c in
                try await c.rows(
                    """
                    SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint
                    WHERE contype = 'c' AND connamespace = 'public'::regnamespace
                    """, logger
                ).map { (table: try $0.text(0), definition: try $0.text(1)) }
            }
            // `CHECK ((status = ANY (ARRAY['open'::text, 'resolved'::text])))`
            let check = /CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)/
            for constraint in constraints {
                let match = try #require(constraint.definition.firstMatch(of: check), "\(constraint.table): \(constraint.definition)")
                lists["\(constraint.table).\(match.1)"] = Set(match.2.matches(of: /'([^']*)'::text/).map { String($0.1) })
            }
        }
        return lists
    }
}
