import Foundation
public import NIOCore

/// Where and how to reach Redis, parsed from a URL:
/// `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS.
public struct RedisConfiguration: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var database: Int
    public var username: String?
    public var password: String?
    public var tls: Bool
    /// A PEM file of CA certificates to trust for TLS, besides the system's.
    public var caFile: String?
    public var poolSize: Int
    public var connectTimeout: TimeAmount
    public var commandTimeout: TimeAmount

    public init(
        host: String = "127.0.0.1", port: Int = 6379, database: Int = 0, username: String? = nil,
        password: String? = nil, tls: Bool = false, caFile: String? = nil, poolSize: Int = 4,
        connectTimeout: TimeAmount = .milliseconds(1000), commandTimeout: TimeAmount = .milliseconds(2000)
    ) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
        self.tls = tls
        self.caFile = caFile
        self.poolSize = poolSize
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
    }

    public init(url string: String) throws {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased() else {
            throw RedisClientError(.invalidURL, "not a URL (expected redis://host:port/db or rediss://…)")
        }
        switch scheme {
        case "redis": self.init(tls: false)
        case "rediss": self.init(tls: true)
        default: throw RedisClientError(.invalidURL, "scheme must be redis or rediss, not \(scheme)")
        }
        guard let host = components.host, !host.isEmpty else {
            throw RedisClientError(.invalidURL, "no host")
        }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 6379
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if !path.isEmpty {
            guard let db = Int(path), db >= 0 else { throw RedisClientError(.invalidURL, "database must be a number, not \(path)") }
            self.database = db
        }
        if let user = components.user, !user.isEmpty { self.username = user.removingPercentEncoding ?? user }
        if let password = components.password, !password.isEmpty {
            self.password = password.removingPercentEncoding ?? password
        }
    }

    /// host:port, for messages. Never includes credentials.
    public var endpoint: String { "\(tls ? "rediss" : "redis")://\(host):\(port)/\(database)" }
}
