/** Effect and record in one typeorm transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('typeorm', 'postgres', await databaseAvailable('postgres'));
describeOrmTransactions('typeorm', 'mysql', await databaseAvailable('mysql'));
