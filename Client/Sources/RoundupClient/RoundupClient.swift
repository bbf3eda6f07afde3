public import Foundation
public import OpenAPIRuntime
public import OpenAPIURLSession

public typealias Change = Components.Schemas.Change
public typealias Account = Components.Schemas.Account
public typealias SyncList = Components.Schemas.SyncList
public typealias SyncChange = Components.Schemas.SyncChange
public typealias SyncFields = Components.Schemas.SyncFields
/// A change's values, typed (`Change.fields`), and the values in them.
public typealias ChangeFields = Components.Schemas.ChangeFields
public typealias Label = Components.Schemas.Label
public typealias Checklist = Components.Schemas.Checklist
public typealias CheckItem = Components.Schemas.CheckItem
public typealias Attachment = Components.Schemas.Attachment
public typealias Location = Components.Schemas.Location
/// What the apps send for labels, checklists and links (`SyncFields`).
public typealias LabelInput = Components.Schemas.LabelInput
public typealias ChecklistInput = Components.Schemas.ChecklistInput
public typealias CheckItemInput = Components.Schemas.CheckItemInput
public typealias AttachmentInput = Components.Schemas.AttachmentInput
public typealias SyncJob = Components.Schemas.SyncJob
public typealias JobStarted = Components.Schemas.JobStarted
public typealias Device = Components.Schemas.Device
public typealias Conflict = Components.Schemas.Conflict
public typealias Duplicate = Components.Schemas.Duplicate

/// roundup-api for the DailyRoundup apps: what they do, on top of the client generated from docs/openapi.yaml
/// (`api`, for anything this layer does not wrap). Every failure the server answers is a `RoundupError`; transient
/// ones are retried first (`RetryPolicy`).
public struct RoundupClient: Sendable {
    public let serverURL: URL
    /// The generated client, with this client's authentication, error and retry handling.
    public let api: Client
    let transport: any ClientTransport
    let retry: RetryPolicy

    /// - Parameters:
    ///   - token: the account's auth token (nil before the account exists).
    ///   - transport: URLSession by default; AsyncHTTPClient's transport streams on Linux too.
    public init(serverURL: URL, token: String? = nil, transport: any ClientTransport = URLSessionTransport(), retry: RetryPolicy = .standard) {
        self.serverURL = serverURL
        self.transport = transport
        self.retry = retry
        var middlewares: [any ClientMiddleware] = [RetryMiddleware(policy: retry), ErrorMiddleware()]
        if let token { middlewares.append(BearerMiddleware(token: token)) }
        self.api = Client(serverURL: serverURL, configuration: Self.configuration, transport: transport, middlewares: middlewares)
    }

    /// The same server with another token.
    public func with(token: String) -> RoundupClient {
        RoundupClient(serverURL: serverURL, token: token, transport: transport, retry: retry)
    }

    /// The server writes times as ISO 8601 with milliseconds.
    static let configuration = Configuration(dateTranscoder: .iso8601WithFractionalSeconds)

    /// Runs an operation, unwrapping a `RoundupError` from the generated client's wrapper.
    func call<Output>(_ operation: () async throws -> Output) async throws -> Output {
        do {
            return try await operation()
        } catch {
            throw RoundupError.unwrap(error)
        }
    }

    /// An answer the document does not describe for a success (the server is newer or broken).
    static func unexpected(_ output: Any, _ function: String = #function) -> RoundupError {
        RoundupError(status: 0, code: OpenEnum(rawValue: "unexpected_response"), message: "\(function): unexpected answer \(output)")
    }
}

// MARK: Set-up

extension RoundupClient {
    /// The Trello side of an account: the API key and webhook secret the user's Trello app has, and the token the user
    /// authorized for that key.
    public struct TrelloSettings: Sendable {
        public var apiKey: String
        public var webhookSecret: String
        public var token: String

        public init(apiKey: String, webhookSecret: String, token: String) {
            self.apiKey = apiKey
            self.webhookSecret = webhookSecret
            self.token = token
        }
    }

    /// A Trello list to pair with a Reminders list.
    public struct ListPairing: Sendable {
        public var name: String
        public var trelloBoardID: String
        public var trelloListID: String
        /// The list's sync settings (direction, fields, filter, initial cards); nil: the server's defaults.
        public var settings: Components.Schemas.SyncSettingsInput?

        public init(name: String, trelloBoardID: String, trelloListID: String, settings: Components.Schemas.SyncSettingsInput? = nil) {
            self.name = name
            self.trelloBoardID = trelloBoardID
            self.trelloListID = trelloListID
            self.settings = settings
        }
    }

    /// What `setUp` made: keep `token` (in the Keychain); it is shown only this once.
    public struct Setup: Sendable {
        public var client: RoundupClient
        public var accountID: String
        public var token: String
        public var list: SyncList
    }

    /// The set-up, in the order the server expects: the account (with the operator's bootstrap token), a first read
    /// that checks the new token, the Trello key and webhook secret, the user's Trello token, and the first list.
    public static func setUp(
        serverURL: URL, bootstrapToken: String, trello: TrelloSettings, list: ListPairing,
        transport: any ClientTransport = URLSessionTransport(), retry: RetryPolicy = .standard
    ) async throws -> Setup {
        let bootstrap = RoundupClient(serverURL: serverURL, token: bootstrapToken, transport: transport, retry: retry)
        let created = try await bootstrap.createAccount()
        let client = bootstrap.with(token: created.authToken)
        _ = try await client.changesPage(after: 0, limit: 1)
        var credentials = Components.Schemas.AccountUpdate()
        credentials.trelloApiKey = trello.apiKey
        credentials.trelloWebhookSecret = trello.webhookSecret
        _ = try await client.updateAccount(credentials)
        var token = Components.Schemas.AccountUpdate()
        token.trelloToken = trello.token
        _ = try await client.updateAccount(token)
        let paired = try await client.pairList(list)
        return Setup(client: client, accountID: created.accountId, token: created.authToken, list: paired)
    }

    /// Creates an account; this client's token must be the operator's bootstrap token.
    public func createAccount() async throws -> Components.Schemas.AccountToken {
        switch try await call({ try await api.createAccount() }) {
        case .created(let created): return try created.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    public func account() async throws -> Account {
        switch try await call({ try await api.getAccount() }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    /// Changes the account's settings (nil members stay as they are); answers the account, credentials masked.
    public func updateAccount(_ update: Components.Schemas.AccountUpdate) async throws -> Account {
        switch try await call({ try await api.updateAccount(body: .json(update)) }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    public func pairList(_ list: ListPairing) async throws -> SyncList {
        let body = Components.Schemas.SyncListCreate(
            name: list.name, trelloBoardId: list.trelloBoardID, trelloListId: list.trelloListID, settings: list.settings)
        switch try await call({ try await api.createSyncList(body: .json(body)) }) {
        case .created(let created): return try created.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    public func lists() async throws -> [SyncList] {
        switch try await call({ try await api.listSyncLists() }) {
        case .ok(let ok): return try ok.body.json.lists
        case let other: throw Self.unexpected(other)
        }
    }
}

// MARK: Devices, conflicts, duplicates

extension RoundupClient {
    /// Registers (or updates) the device that gets the account's pushes; `bundleID` names the app (one of the server's
    /// `ROUNDUP_APP_BUNDLE_IDS`; nil: the server's default app).
    public func registerDevice(
        id: String, apnsToken: String, platform: Roundup.DevicePlatform, environment: Roundup.APNsEnvironment = .production,
        bundleID: String? = nil
    ) async throws -> Device {
        let body = Components.Schemas.DeviceRegistration(
            deviceId: id, apnsToken: apnsToken, platform: OpenEnum(platform), environment: OpenEnum(environment), bundleId: bundleID)
        switch try await call({ try await api.registerDevice(body: .json(body)) }) {
        case .created(let created): return try created.body.json
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    public func devices() async throws -> [Device] {
        switch try await call({ try await api.listDevices() }) {
        case .ok(let ok): return try ok.body.json.devices
        case let other: throw Self.unexpected(other)
        }
    }

    public func deleteDevice(_ id: String) async throws {
        switch try await call({ try await api.deleteDevice(path: .init(deviceId: id)) }) {
        case .noContent: return
        case let other: throw Self.unexpected(other)
        }
    }

    /// The account's conflicts waiting for the user (and resolved ones).
    public func conflicts() async throws -> [Conflict] {
        switch try await call({ try await api.listConflicts() }) {
        case .ok(let ok): return try ok.body.json.conflicts
        case let other: throw Self.unexpected(other)
        }
    }

    /// How the user resolves a conflict.
    public enum ConflictChoice: Sendable {
        /// Trello's value stays, and reaches the apps.
        case trello
        /// The reminder's value is written to Trello.
        case reminders
        /// This value is written to Trello and sent to the apps.
        case value(OpenAPIValueContainer)
    }

    public func resolveConflict(_ id: Int, choice: ConflictChoice) async throws -> Conflict {
        let body: Components.Schemas.ConflictResolution
        switch choice {
        case .trello: body = .init(choice: .trello)
        case .reminders: body = .init(choice: .reminders)
        case .value(let value): body = .init(choice: .value, value: value)
        }
        switch try await call({ try await api.resolveConflict(path: .init(id: id), body: .json(body)) }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    public func duplicates() async throws -> [Duplicate] {
        switch try await call({ try await api.listDuplicates() }) {
        case .ok(let ok): return try ok.body.json.duplicates
        case let other: throw Self.unexpected(other)
        }
    }

    /// `merge`: the reminder is the card; `keepBoth`: a card is made for the reminder.
    public func resolveDuplicate(_ id: Int, action: Components.Schemas.DuplicateResolution.ActionPayload) async throws -> Duplicate {
        switch try await call({ try await api.resolveDuplicate(path: .init(id: id), body: .json(.init(action: action))) }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }
}
