mod server;
