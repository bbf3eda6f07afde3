// swift-tools-version: 6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "roundup-server",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "roundup-ingress", targets: ["roundup-ingress"]),
        .executable(name: "roundup-worker", targets: ["roundup-worker"]),
        .executable(name: "roundup-api", targets: ["roundup-api"]),
        .executable(name: "roundupctl", targets: ["roundupctl"]),
        .executable(name: "roundup-pusher", targets: ["roundup-pusher"]),
        .library(name: "RoundupRedis", targets: ["RoundupRedis"]),
        .library(name: "RoundupCore", targets: ["RoundupCore"]),
        .library(name: "RoundupRuntime", targets: ["RoundupRuntime"]),
        .library(name: "RoundupStreams", targets: ["RoundupStreams"]),
        .library(name: "RoundupStore", targets: ["RoundupStore"]),
        .library(name: "RoundupDatabase", targets: ["RoundupDatabase"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        // The apps' client, a package of its own (Client/), tested here against the real processes; AsyncHTTPClient's
        // transport streams on Linux, where URLSession buffers whole responses.
        .package(path: "Client"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        // Traces over OTLP/HTTP only (no gRPC): the OTLPHTTP trait.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        // C: Debian's libhiredis-dev, used for its RESP reader (redisReader). No `pkgConfig: "hiredis"`:
        // its only flags are -I/usr/include/hiredis (the shim includes <hiredis/…> instead) and
        // -D_FILE_OFFSET_BITS=64, which SwiftPM rejects with a warning on every build.
        .systemLibrary(
            name: "CHiredis",
            providers: [.apt(["libhiredis-dev"])]
        ),
        // A Redis client (standalone or cluster) over SwiftNIO, with hiredis's RESP reader; nothing of ours.
        .target(
            name: "RoundupRedis",
            dependencies: [
                "CHiredis",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The domain: Trello's webhook payloads, card mapping and signatures, webhook callbacks, JSON, and the values
        // processes and backends share (a configuration error, a PostgreSQL URL, a trace context). No Roundup dependency.
        .target(
            name: "RoundupCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Runtime plumbing every process shares: configuration, logging, metrics, traces, the ServiceGroup runner, the
        // health/metrics HTTP server, HTTP limits and the Redis client factory.
        .target(
            name: "RoundupRuntime",
            dependencies: [
                "RoundupCore", "RoundupRedis",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // Our streams: the consumer and its drivers (Redis, sharded, memory), the stream catalogue and keys, pauses,
        // dead letters and the messages' stream encoding. RoundupRedis under it is only a Redis client.
        .target(
            name: "RoundupStreams",
            dependencies: [
                "RoundupCore", "RoundupRedis", "RoundupRuntime",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The store's records, repositories and rules: no database import (the compiler keeps it so), so every rule is
        // written once, for both backends, and runs in a test without a database.
        .target(
            name: "RoundupStore",
            dependencies: [
                "RoundupCore",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The SQLite backend (GRDB): SQL, transactions, migrations; the rules come from RoundupStore.
        .target(
            name: "RoundupSQLite",
            dependencies: [
                "RoundupCore", "RoundupStore",
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, which GRDB links: the changes page reads a row's text in place (`PendingChangeCells`).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The PostgreSQL backend (PostgresNIO): SQL, transactions, account locks, retries, migrations.
        .target(
            name: "RoundupPostgres",
            dependencies: [
                "RoundupCore", "RoundupStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Opens the backend `ROUNDUP_DATABASE_URL` names; the processes' only tie to a backend.
        .target(
            name: "RoundupDatabase",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStore", "RoundupSQLite", "RoundupPostgres",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RoundupTrello",
            dependencies: [
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "RoundupCore",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The outbound path: sync jobs, conflicts, duplicates, echo fingerprints, shared Trello rate limits.
        .target(
            name: "RoundupJobs",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupTrello",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // roundup-pusher: APNs over SwiftNIO's HTTP/2 streams (one layer under AsyncHTTPClient, for the push rate).
        .target(
            name: "RoundupPush",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundup-pusher",
            dependencies: [
                "RoundupPush", "RoundupRuntime",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RoundupAPI",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase", "RoundupTrello", "RoundupJobs",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundup-api",
            dependencies: [
                "RoundupAPI", "RoundupRuntime",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RoundupOps",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase", "RoundupJobs", "RoundupPush",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The operators' web dashboard (`roundupctl dashboard`): Hummingbird and swift-mustache over RoundupOps.
        .target(
            name: "RoundupDashboard",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase", "RoundupOps",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundupctl",
            dependencies: [
                "RoundupOps", "RoundupDashboard",
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupPush", "RoundupRedis", "RoundupStore", "RoundupDatabase",
                "RoundupJobs",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RoundupIngress",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "RoundupWorker",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase", "RoundupTrello", "RoundupJobs",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundup-ingress",
            dependencies: [
                "RoundupIngress", "RoundupRuntime",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundup-worker",
            dependencies: [
                "RoundupWorker", "RoundupRuntime",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Test support: spawns real redis-server processes, the real executables, and a fake Trello.
        .target(
            name: "RoundupTesting",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupDatabase",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "roundup-bench",
            dependencies: [
                "RoundupTesting", "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore",
                "RoundupPush",
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fault suite's long part (scripts/chaos → docs/RELIABILITY.md): real processes broken under load.
        .executableTarget(
            name: "roundup-chaos",
            dependencies: [
                "RoundupTesting", "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "RoundupTests",
            dependencies: [
                "RoundupCore", "RoundupRuntime", "RoundupStreams", "RoundupRedis", "RoundupStore", "RoundupSQLite", "RoundupPostgres",
                "RoundupTrello", "RoundupIngress",
                "RoundupWorker", "RoundupTesting", "RoundupAPI", "RoundupOps", "RoundupJobs", "RoundupPush", "RoundupDashboard",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                // In-process API tests: `app.test(.router)`.
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "RoundupClient", package: "Client"),
                .product(name: "RoundupSync", package: "Client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
