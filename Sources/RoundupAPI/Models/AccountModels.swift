public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/account (docs/openapi.yaml: AccountToken, Account, AccountUpdate).

/// `POST /dailyroundup/account` and `POST /dailyroundup/account/token`: the token in full, shown only this once.
public struct AccountToken: ResponseCodable, Sendable, Equatable {
    public var accountID: String
    public var authToken: String

    enum CodingKeys: String, CodingKey {
        case accountID = "account_id"
        case authToken = "auth_token"
    }
}

/// An account as its owner sees it: credentials masked, every member present (null when not set).
public struct Account: ResponseCodable, Sendable, Equatable {
    public var accountID: String
    @Nullable public var trelloAPIKey: String?
    @Nullable public var trelloToken: String?
    @Nullable public var trelloWebhookSecret: String?
    public var conflictPolicy: ConflictPolicy
    public var deleteMode: DeleteMode
    public var createdAt: String
    public var updatedAt: String
    /// Set when the user must act (`trello_token_revoked`: send a new trello_token); cleared by doing so.
    @Nullable public var needsAttention: AttentionReason?
    /// The IANA time zone all-day dates are written in (UTC until set).
    public var timeZone: String

    enum CodingKeys: String, CodingKey {
        case accountID = "account_id"
        case trelloAPIKey = "trello_api_key"
        case trelloToken = "trello_token"
        case trelloWebhookSecret = "trello_webhook_secret"
        case conflictPolicy = "conflict_policy"
        case deleteMode = "delete_mode"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case needsAttention = "needs_attention"
        case timeZone = "time_zone"
    }

    init(_ details: AccountDetails) {
        accountID = details.id
        trelloAPIKey = maskSecret(details.trelloAPIKey)
        trelloToken = maskSecret(details.trelloToken)
        trelloWebhookSecret = maskSecret(details.trelloWebhookSecret)
        conflictPolicy = details.conflictPolicy
        deleteMode = details.deleteMode
        createdAt = details.createdAt
        updatedAt = details.updatedAt
        needsAttention = details.needsAttention
        timeZone = (details.timeZone ?? .utc).rawValue
    }
}

/// `PUT /dailyroundup/account`: every member optional, at least one sent.
public struct AccountChanges: Codable, Sendable, Equatable {
    public var trelloAPIKey: String?
    public var trelloToken: String?
    public var trelloWebhookSecret: String?
    public var conflictPolicy: ConflictPolicy?
    public var deleteMode: DeleteMode?
    public var timeZone: String?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case trelloAPIKey = "trello_api_key"
        case trelloToken = "trello_token"
        case trelloWebhookSecret = "trello_webhook_secret"
        case conflictPolicy = "conflict_policy"
        case deleteMode = "delete_mode"
        case timeZone = "time_zone"
    }

    /// The body checked member by member: a wrong type is 400, a wrong value 422, an unknown member 422.
    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        trelloAPIKey = try body.credential(CodingKeys.trelloAPIKey.rawValue, required: false, maxLength: 200)
        trelloToken = try body.credential(CodingKeys.trelloToken.rawValue, required: false, maxLength: 500)
        trelloWebhookSecret = try body.credential(CodingKeys.trelloWebhookSecret.rawValue, required: false, maxLength: 500)
        conflictPolicy = try body.oneOf(CodingKeys.conflictPolicy.rawValue, ConflictPolicy.self, required: false)
        deleteMode = try body.oneOf(CodingKeys.deleteMode.rawValue, DeleteMode.self, required: false)
        if let zone = try body.string(CodingKeys.timeZone.rawValue, required: false, maxLength: 64) {
            guard AccountTimeZone(rawValue: zone) != nil else {
                throw APIError.unprocessable("time_zone must be an IANA time zone name such as Europe/Berlin or America/New_York (or UTC)")
            }
            timeZone = zone
        }
    }

    var update: AccountUpdate {
        AccountUpdate(
            trelloAPIKey: trelloAPIKey, trelloToken: trelloToken, trelloWebhookSecret: trelloWebhookSecret, conflictPolicy: conflictPolicy,
            deleteMode: deleteMode, timeZone: timeZone.flatMap(AccountTimeZone.init(rawValue:)))
    }
}
