import PostgresNIO
import RoundupStore

/// Hot reads as named prepared statements: PostgreSQL parses and plans each once per connection (PostgresNIO prepares
/// it on a connection's first use), where an unnamed statement is parsed and planned on every request. The token
/// lookup, run by every API request, took 0.039 ms to plan and 0.006 ms to run (pg_stat_statements under the changes
/// benchmark); prepared, its planning is gone. The changes page was tried too: PostgreSQL kept planning it for
/// each call (a custom plan for its LIMIT and id bound beats the generic one), so it gained nothing and stays unnamed.
///
/// A pooler in transaction mode (PgBouncer before 1.21) cannot carry named statements between transactions: put the
/// API's connections straight on PostgreSQL or on a pooler that tracks them (docs/SCALING.md).
enum PostgresStatements {
    /// `accountID(tokenHash:)`.
    struct AccountByToken: PostgresPreparedStatement {
        static let name = "roundup_account_by_token"
        static let sql = "SELECT id FROM accounts WHERE auth_token_hash = $1"
        typealias Row = String
        let tokenHash: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(tokenHash)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> String { try row.makeRandomAccess().text(0) }
    }
}
