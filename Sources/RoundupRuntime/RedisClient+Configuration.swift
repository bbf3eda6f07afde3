public import Logging
public import RoundupRedis

extension RedisClient {
    /// The client `ROUNDUP_REDIS_URL`, `ROUNDUP_REDIS_CLUSTER` and `ROUNDUP_REDIS_CA_FILE` describe.
    public static func make(configuration: RoundupConfiguration, logger: Logger) throws -> RedisClient {
        RedisClient(configuration: try RedisConfiguration(configuration), logger: logger)
    }
}

extension RedisConfiguration {
    /// What `ROUNDUP_REDIS_URL`, `ROUNDUP_REDIS_CLUSTER` and `ROUNDUP_REDIS_CA_FILE` describe.
    public init(_ configuration: RoundupConfiguration) throws {
        try self.init(url: configuration.redisURL, cluster: configuration.redisCluster)
        caFile = configuration.redisCAFile
    }
}
