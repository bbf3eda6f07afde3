import Hummingbird
import RoundupCore
import RoundupStore

/// `/dailyroundup/devices`: the account's devices for push notifications.
struct DeviceRoutes {
    let devices: any DeviceRepository
    /// The apps the server sends pushes for (`ROUNDUP_APP_BUNDLE_IDS`, …).
    let bundleIDs: Set<BundleID>
    /// `ROUNDUP_DEVICES_PER_ACCOUNT`.
    let devicesPerAccount: Int

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { _, context in try await list(context.account) }
        routes.post { request, context in try await register(context.account, request, context) }
        routes.delete("{device_id}") { _, context in try await delete(context.account, context.parameters.require("device_id")) }
        return routes
    }

    func list(_ account: String) async throws -> DevicePage {
        DevicePage(devices: try await devices.devices(accountID: account).map(Device.init))
    }

    /// 201 for a new device, 200 for one registered again (a new token, say). 422 for an app the server sends no
    /// pushes for (`bundle_id` not among `ROUNDUP_APP_BUNDLE_IDS`, `ROUNDUP_APNS_TOPIC` and the apps file: no account
    /// may make the pusher sign for another app), and for a new device beyond `ROUNDUP_DEVICES_PER_ACCOUNT`.
    func register(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> EditedResponse<Device> {
        let registration = try DeviceRegistration(try await JSONBody.read(request, context: context))
        if let bundleID = registration.bundleID, !bundleIDs.contains(bundleID) {
            let known = bundleIDs.map(\.rawValue).sorted()
            throw APIError(
                .unprocessableContent, "unknown_bundle_id",
                "bundle_id \(bundleID) is not an app this server sends pushes for"
                    + (known.isEmpty ? " (it knows none: leave bundle_id out for the default app)" : " (it knows \(known.joined(separator: ", ")))"))
        }
        let limit = devicesPerAccount
        let tooMany = APIError(
            .unprocessableContent, "too_many_devices",
            "the account has \(limit) devices already (the most it may); delete one with DELETE /dailyroundup/devices/{device_id}")
        let existing = try await devices.devices(accountID: account)
        if existing.count >= limit, !existing.contains(where: { $0.deviceID == registration.deviceID }) { throw tooMany }
        let (device, created) = try await devices.upsertDevice(
            accountID: account, deviceID: registration.deviceID, apnsToken: registration.apnsToken, platform: registration.platform,
            environment: registration.environment, bundleID: registration.bundleID)
        // Registrations that raced past the check: the one that made too many is taken back.
        if created, try await devices.devices(accountID: account).count > limit {
            _ = try await devices.deleteDevice(accountID: account, deviceID: registration.deviceID)
            throw tooMany
        }
        return EditedResponse(status: created ? .created : .ok, response: Device(device))
    }

    func delete(_ account: String, _ deviceID: String) async throws -> HTTPResponse.Status {
        guard try await devices.deleteDevice(accountID: account, deviceID: deviceID) else { throw APIError.notFound("no device \(deviceID)") }
        return .noContent
    }
}
