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
    public var createdAt: String
    public var updatedAt: String

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case platform, environment
        case apnsToken = "apns_token"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    init(_ device: DeviceRecord) {
        deviceID = device.deviceID
        platform = device.platform
        environment = device.environment
        apnsToken = maskSecret(device.apnsToken)
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

    enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceID = "device_id"
        case apnsToken = "apns_token"
        case platform, environment
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        deviceID = try body.requiredString(CodingKeys.deviceID.rawValue, maxLength: 200)
        apnsToken = try body.requiredString(CodingKeys.apnsToken.rawValue, maxLength: 400).lowercased()
        guard apnsToken.count >= 32, apnsToken.count % 2 == 0, apnsToken.allSatisfy(\.isHexDigit) else {
            throw APIError.unprocessable("apns_token must be the device token in hex")
        }
        platform = try body.requiredOneOf(CodingKeys.platform.rawValue, DevicePlatform.self)
        environment = try body.requiredOneOf(CodingKeys.environment.rawValue, APNsEnvironment.self)
    }
}
