module github.com/baton-locks/baton/clients/go

go 1.19
