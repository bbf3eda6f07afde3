import Foundation

/// `postgres://user:password@host:port/database?sslmode=disable|prefer|require|verify-full`, checked once at start.
public struct PostgresURL: Sendable, Equatable {
    public enum TLSMode: String, Sendable { case disable, prefer, require, verifyFull = "verify-full" }
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    public init(_ text: String) throws {
        let key = "ROUNDUP_DATABASE_URL"
        guard let c = URLComponents(string: text), c.scheme == "postgres" || c.scheme == "postgresql", let host = c.host, !host.isEmpty else {
            throw ConfigurationError(key: key, problem: "must look like postgres://user:password@host:port/database")
        }
        guard let user = c.user, !user.isEmpty else { throw ConfigurationError(key: key, problem: "must name a user (postgres://USER@host/db)") }
        let database = String(c.path.drop { $0 == "/" })
        guard !database.isEmpty else { throw ConfigurationError(key: key, problem: "must name a database (postgres://user@host/DATABASE)") }
        self.host = host
        self.port = c.port ?? 5432
        self.username = user.removingPercentEncoding ?? user
        self.password = c.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database
        let mode = c.queryItems?.first { $0.name == "sslmode" }?.value ?? "prefer"
        guard let tls = TLSMode(rawValue: mode) else {
            throw ConfigurationError(key: key, problem: "sslmode must be disable, prefer, require or verify-full (got \(mode))")
        }
        self.tls = tls
    }

    /// The URL with its password masked, for logs and `roundupctl check`.
    public var masked: String { "postgres://\(username)\(password == nil ? "" : ":***")@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)" }
}
