import Hummingbird
import RoundupStore

/// `/dailyroundup/devices`: the account's devices for push notifications.
struct DeviceRoutes {
    let api: API

    var collection: RouteCollection<APIRequestContext> {
        let routes = RouteCollection(context: APIRequestContext.self)
        routes.add(middleware: api.authentication)
        routes.get { _, context in try await list(context.requireAccount()) }
        routes.post { request, context in try await register(context.requireAccount(), request, context) }
        routes.delete("{device_id}") { _, context in try await delete(context.requireAccount(), context.parameters.require("device_id")) }
        return routes
    }

    func list(_ account: String) async throws -> DevicePage {
        DevicePage(devices: try await api.store.devices(accountID: account).map(Device.init))
    }

    /// 201 for a new device, 200 for one registered again (a new token, say).
    func register(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<Device> {
        let registration = try DeviceRegistration(try await JSONBody.read(request, context: context))
        let (device, created) = try await api.store.upsertDevice(
            accountID: account, deviceID: registration.deviceID, apnsToken: registration.apnsToken, platform: registration.platform,
            environment: registration.environment, bundleID: registration.bundleID)
        return EditedResponse(status: created ? .created : .ok, response: Device(device))
    }

    func delete(_ account: String, _ deviceID: String) async throws -> HTTPResponse.Status {
        guard try await api.store.deleteDevice(accountID: account, deviceID: deviceID) else { throw APIError.notFound("no device \(deviceID)") }
        return .noContent
    }
}
