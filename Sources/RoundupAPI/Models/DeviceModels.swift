public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/devices.

/// A registered device; its APNs token masked.
public struct Device: ResponseCodable, Sendable, Equatable {
    public var deviceID: String
    public var platform: DevicePlatform
    public var environment: APNsEnvironment
    @Nullable public var apnsToken: String?
    /// The app it registered with; null: the server's default app.
    @Nullable public var bundleID: BundleID?
    public var createdAt: String
    public var updatedAt: String

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case platform, environment
        case apnsToken = "apns_token"
        case bundleID = "bundle_id"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    init(_ device: DeviceRecord) {
        deviceID = device.deviceID
        platform = device.platform
        environment = device.environment
        apnsToken = maskSecret(device.apnsToken)
        bundleID = device.bundleID
        createdAt = device.createdAt
        updatedAt = device.updatedAt
    }
}

/// `GET /dailyroundup/devices`.
public struct DevicePage: ResponseCodable, Sendable, Equatable {
    public var devices: [Device]
}

/// `POST /dailyroundup/devices`.
public struct DeviceRegistration: Codable, Sendable, Equatable {
    public var deviceID: String
    /// The device token in lower-case hex.
    public var apnsToken: String
    public var platform: DevicePlatform
    public var environment: APNsEnvironment
    /// The app's bundle id (its pushes' topic); absent: the server's default app.
    public var bundleID: BundleID?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceID = "device_id"
        case apnsToken = "apns_token"
        case platform, environment
        case bundleID = "bundle_id"
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        deviceID = try body.requiredString(CodingKeys.deviceID.rawValue, maxLength: 200)
        apnsToken = try body.requiredString(CodingKeys.apnsToken.rawValue, maxLength: 400).lowercased()
        // ASCII hex digits only (`Character.isHexDigit` also takes their full-width forms, 3 bytes each).
        guard apnsToken.utf8.count >= 32, apnsToken.utf8.count % 2 == 0, apnsToken.utf8.allSatisfy(IdentifierShape.isLowerHex) else {
            throw APIError.unprocessable("apns_token must be the device token in hex")
        }
        platform = try body.requiredOneOf(CodingKeys.platform.rawValue, DevicePlatform.self)
        environment = try body.requiredOneOf(CodingKeys.environment.rawValue, APNsEnvironment.self)
        if let text = try body.string(CodingKeys.bundleID.rawValue, required: false, maxLength: 155) {
            guard let id = BundleID(rawValue: text) else {
                throw APIError.unprocessable("bundle_id must be an app's bundle id: reverse DNS such as app.dailyroundup.macos")
            }
            bundleID = id
        }
    }
}
