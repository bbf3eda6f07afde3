// swift-tools-version: 6.2
// RoundupClient: the Swift client of roundup-api for the DailyRoundup apps (iOS 17, macOS 14, and Linux, where its
// tests run). A package of its own, so an app that adds it builds only swift-openapi-runtime and
// swift-openapi-urlsession (and their small dependencies), none of the server's. See docs/API.md, "The Swift client".
import PackageDescription

let package = Package(
    name: "RoundupClient",
    platforms: [.iOS(.v17), .macOS(.v14)],
    products: [
        .library(name: "RoundupClient", targets: ["RoundupClient"]),
        // The apps' sync loop over RoundupClient (no EventKit: the app's adapter is a `RemindersStore`).
        .library(name: "RoundupSync", targets: ["RoundupSync"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4"),
        .package(url: "https://github.com/apple/swift-openapi-urlsession", from: "1.4.0"),
    ],
    targets: [
        .target(
            name: "RoundupClient",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]),
        .target(
            name: "RoundupSync",
            dependencies: ["RoundupClient"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]),
    ],
    swiftLanguageModes: [.v6]
)
